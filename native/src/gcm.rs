//! AES-256-GCM whose GHASH reduces once per four blocks, for x86-64 with AES-NI and PCLMULQDQ.
//!
//! Why: with TSO the sealing loop is the data path's cost, and RustCrypto's `aes-gcm` 0.10 spends
//! most of it in GHASH (`polyval`'s CLMUL backend multiplies and reduces one block at a time, each
//! waiting on the last: 39 % of the sender's samples, docs/performance.md). Here GHASH is
//! POLYVAL over byte-reversed blocks (RFC 8452, Appendix A), as the `ghash` crate computes it,
//! with the Karatsuba products of four blocks against H^4..H^1 summed before one reduction
//! (the reduction is linear), and the counter mode is the `aes` crate's eight-block AES-NI path.
//! The bytes are the `aes-gcm` crate's (the tests check them against it); where the CPU lacks a
//! feature, `FastGcm::new` gives None and the `aes-gcm` crate is used.

use core::arch::x86_64::*;

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes256;

const BLOCK: usize = 16;
/// Counter blocks encrypted per call into AES (its AES-NI path pipelines eight).
const CTR_BATCH: usize = 8;

pub(crate) struct FastGcm {
    aes: Aes256,
    /// H^1..H^4 in the POLYVAL field (mulX_POLYVAL of the byte-reversed H, then powers).
    powers: [[u8; BLOCK]; 4],
}

impl FastGcm {
    /// None where the CPU lacks AES-NI, PCLMULQDQ or SSSE3 (the module is x86-64 only).
    pub(crate) fn new(key: &[u8; 32]) -> Option<Self> {
        if !(is_x86_feature_detected!("aes") && is_x86_feature_detected!("pclmulqdq") && is_x86_feature_detected!("ssse3")) {
            return None;
        }
        let aes = Aes256::new(GenericArray::from_slice(key));
        let mut h = GenericArray::default();
        aes.encrypt_block(&mut h);
        let mut hr: [u8; BLOCK] = h.into();
        hr.reverse();
        let h1 = mulx(&hr);
        let mut powers = [h1; 4];
        for i in 1..4 {
            powers[i] = unsafe { store(dot(load(&powers[i - 1]), load(&h1))) };
        }
        Some(FastGcm { aes, powers })
    }

    /// Encrypt `buf` in place; returns the tag.
    pub(crate) fn seal(&self, nonce: &[u8; 12], aad: &[u8], buf: &mut [u8]) -> [u8; BLOCK] {
        self.ctr(nonce, buf);
        self.tag(nonce, aad, buf)
    }

    /// Decrypt `buf` in place if `tag` authenticates it; false (and `buf` untouched) if not.
    pub(crate) fn open(&self, nonce: &[u8; 12], aad: &[u8], buf: &mut [u8], tag: &[u8]) -> bool {
        let expected = self.tag(nonce, aad, buf);
        // Constant time: every byte compared.
        if expected.iter().zip(tag).fold(0u8, |d, (a, b)| d | (a ^ b)) != 0 || tag.len() != BLOCK {
            return false;
        }
        self.ctr(nonce, buf);
        true
    }

    /// XOR the keystream from counter 2 on (counter 1 masks the tag).
    fn ctr(&self, nonce: &[u8; 12], buf: &mut [u8]) {
        let mut blocks = [GenericArray::<u8, aes::cipher::consts::U16>::default(); CTR_BATCH];
        let mut counter: u32 = 2;
        for chunk in buf.chunks_mut(BLOCK * CTR_BATCH) {
            let n = chunk.len().div_ceil(BLOCK);
            for b in blocks.iter_mut().take(n) {
                b[..12].copy_from_slice(nonce);
                b[12..].copy_from_slice(&counter.to_be_bytes());
                counter = counter.wrapping_add(1);
            }
            self.aes.encrypt_blocks(&mut blocks[..n]);
            for (d, k) in chunk.chunks_mut(BLOCK).zip(&blocks) {
                for (x, y) in d.iter_mut().zip(k.iter()) {
                    *x ^= y;
                }
            }
        }
    }

    /// E(K, J0) XOR GHASH(aad, ciphertext, lengths).
    fn tag(&self, nonce: &[u8; 12], aad: &[u8], ct: &[u8]) -> [u8; BLOCK] {
        let mut j0 = GenericArray::default();
        j0[..12].copy_from_slice(nonce);
        j0[15] = 1;
        self.aes.encrypt_block(&mut j0);
        let mut lengths = [0u8; BLOCK];
        lengths[..8].copy_from_slice(&((aad.len() as u64) * 8).to_be_bytes());
        lengths[8..].copy_from_slice(&((ct.len() as u64) * 8).to_be_bytes());
        let mut s = unsafe {
            let mut y = _mm_setzero_si128();
            y = self.absorb(y, aad);
            y = self.absorb(y, ct);
            y = self.absorb(y, &lengths);
            store(y)
        };
        s.reverse();
        for (a, b) in s.iter_mut().zip(j0.iter()) {
            *a ^= b;
        }
        s
    }

    /// POLYVAL state `y` after `data` (zero-padded to whole blocks), each block byte-reversed.
    #[target_feature(enable = "pclmulqdq,ssse3,sse2")]
    unsafe fn absorb(&self, mut y: __m128i, data: &[u8]) -> __m128i {
        let rev = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let h = [load(&self.powers[0]), load(&self.powers[1]), load(&self.powers[2]), load(&self.powers[3])];
        let mut quads = data.chunks_exact(4 * BLOCK);
        for q in &mut quads {
            let x0 = _mm_shuffle_epi8(_mm_loadu_si128(q.as_ptr() as *const __m128i), rev);
            let x1 = _mm_shuffle_epi8(_mm_loadu_si128(q.as_ptr().add(16) as *const __m128i), rev);
            let x2 = _mm_shuffle_epi8(_mm_loadu_si128(q.as_ptr().add(32) as *const __m128i), rev);
            let x3 = _mm_shuffle_epi8(_mm_loadu_si128(q.as_ptr().add(48) as *const __m128i), rev);
            let (a0, a1, a2) = karatsuba(_mm_xor_si128(y, x0), h[3]);
            let (b0, b1, b2) = karatsuba(x1, h[2]);
            let (c0, c1, c2) = karatsuba(x2, h[1]);
            let (d0, d1, d2) = karatsuba(x3, h[0]);
            y = reduce(
                _mm_xor_si128(_mm_xor_si128(a0, b0), _mm_xor_si128(c0, d0)),
                _mm_xor_si128(_mm_xor_si128(a1, b1), _mm_xor_si128(c1, d1)),
                _mm_xor_si128(_mm_xor_si128(a2, b2), _mm_xor_si128(c2, d2)),
            );
        }
        for b in quads.remainder().chunks(BLOCK) {
            let mut block = [0u8; BLOCK];
            block[..b.len()].copy_from_slice(b);
            let x = _mm_shuffle_epi8(_mm_loadu_si128(block.as_ptr() as *const __m128i), rev);
            let (t0, t1, t2) = karatsuba(_mm_xor_si128(y, x), h[0]);
            y = reduce(t0, t1, t2);
        }
        y
    }
}

/// mulX_POLYVAL (RFC 8452, Appendix A), as `polyval::mulx`.
fn mulx(block: &[u8; BLOCK]) -> [u8; BLOCK] {
    let mut v = u128::from_le_bytes(*block);
    let hi = v >> 127;
    v <<= 1;
    v ^= hi ^ (hi << 127) ^ (hi << 126) ^ (hi << 121);
    v.to_le_bytes()
}

#[inline]
unsafe fn load(b: &[u8; BLOCK]) -> __m128i {
    _mm_loadu_si128(b.as_ptr() as *const __m128i)
}

#[inline]
unsafe fn store(v: __m128i) -> [u8; BLOCK] {
    let mut b = [0u8; BLOCK];
    _mm_storeu_si128(b.as_mut_ptr() as *mut __m128i, v);
    b
}

/// The POLYVAL product a * b * x^-128.
#[target_feature(enable = "pclmulqdq,sse2")]
unsafe fn dot(a: __m128i, b: __m128i) -> __m128i {
    let (t0, t1, t2) = karatsuba(a, b);
    reduce(t0, t1, t2)
}

/// The unreduced 256-bit product as `polyval`'s CLMUL backend splits it: low, high and middle
/// (the middle already corrected), each linear in `y`, so products of several blocks add up.
#[inline]
#[target_feature(enable = "pclmulqdq,sse2")]
unsafe fn karatsuba(y: __m128i, h: __m128i) -> (__m128i, __m128i, __m128i) {
    let h2 = _mm_xor_si128(h, _mm_shuffle_epi32(h, 0x0E));
    let y2 = _mm_xor_si128(y, _mm_shuffle_epi32(y, 0x0E));
    let t0 = _mm_clmulepi64_si128(y, h, 0x00);
    let t1 = _mm_clmulepi64_si128(y, h, 0x11);
    let t2 = _mm_clmulepi64_si128(y2, h2, 0x00);
    (t0, t1, _mm_xor_si128(t2, _mm_xor_si128(t0, t1)))
}

/// `polyval`'s CLMUL reduction of a Karatsuba product (polyval-0.6 src/backend/clmul.rs).
#[inline]
#[target_feature(enable = "pclmulqdq,sse2")]
unsafe fn reduce(t0: __m128i, t1: __m128i, t2: __m128i) -> __m128i {
    let v0 = t0;
    let v1 = _mm_xor_si128(_mm_shuffle_epi32(t0, 0x0E), t2);
    let v2 = _mm_xor_si128(t1, _mm_shuffle_epi32(t2, 0x0E));
    let v3 = _mm_shuffle_epi32(t1, 0x0E);
    let v2 = xor5(v2, v0, _mm_srli_epi64(v0, 1), _mm_srli_epi64(v0, 2), _mm_srli_epi64(v0, 7));
    let v1 = xor4(v1, _mm_slli_epi64(v0, 63), _mm_slli_epi64(v0, 62), _mm_slli_epi64(v0, 57));
    let v3 = xor5(v3, v1, _mm_srli_epi64(v1, 1), _mm_srli_epi64(v1, 2), _mm_srli_epi64(v1, 7));
    let v2 = xor4(v2, _mm_slli_epi64(v1, 63), _mm_slli_epi64(v1, 62), _mm_slli_epi64(v1, 57));
    _mm_unpacklo_epi64(v2, v3)
}

#[inline]
#[target_feature(enable = "sse2")]
unsafe fn xor4(a: __m128i, b: __m128i, c: __m128i, d: __m128i) -> __m128i {
    _mm_xor_si128(_mm_xor_si128(a, b), _mm_xor_si128(c, d))
}

#[inline]
#[target_feature(enable = "sse2")]
unsafe fn xor5(a: __m128i, b: __m128i, c: __m128i, d: __m128i, e: __m128i) -> __m128i {
    _mm_xor_si128(xor4(a, b, c, d), e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::Aes256Gcm;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    #[test]
    fn the_same_bytes_as_the_aes_gcm_crate_at_every_length() {
        let Some(_) = FastGcm::new(&[0; 32]) else { return }; // not this CPU
        for seed in 0..4u32 {
            let key: [u8; 32] = bytes(32, seed + 11).try_into().unwrap();
            let nonce: [u8; 12] = bytes(12, seed + 99).try_into().unwrap();
            let fast = FastGcm::new(&key).unwrap();
            let reference = Aes256Gcm::new_from_slice(&key).unwrap();
            for aad_len in [0, 10, 16, 17, 70] {
                let aad = bytes(aad_len, seed + 5);
                for len in (0..260).chain([1399, 1400, 1428, 1454, 4000, 9000]) {
                    let plain = bytes(len, len as u32 + seed);
                    let mut a = plain.clone();
                    let tag = fast.seal(&nonce, &aad, &mut a);
                    let mut b = plain.clone();
                    let want = reference.encrypt_in_place_detached(GenericArray::from_slice(&nonce), &aad, &mut b).unwrap();
                    assert_eq!((a.as_slice(), &tag[..]), (b.as_slice(), &want[..]), "aad {aad_len} len {len}");
                    assert!(fast.open(&nonce, &aad, &mut a, &tag));
                    assert_eq!(a, plain);
                    if len > 0 {
                        let mut c = b.clone();
                        c[len / 2] ^= 1;
                        assert!(!fast.open(&nonce, &aad, &mut c, &want), "tampered, len {len}");
                        c[len / 2] ^= 1;
                        assert_eq!(c, b, "a refused record is left as it came");
                    }
                    let mut bad = want;
                    bad[15] ^= 0x80;
                    assert!(!fast.open(&nonce, &aad, &mut b.clone(), &bad));
                }
            }
        }
    }
}
