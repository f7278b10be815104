//! evio's native data path: the per-frame loops of `FdDatapath` (evio/tunnel/datapath/send.py, receive.py) in Rust.
//!
//! One call per burst, with the GIL released: `TxRing::tap_pass` drains the TAP into a ring of
//! record slots (with TSO, a TCP super-frame cut into segments there, tso.rs), seals each in place
//! (AES-GCM by gcm.rs where the CPU allows) and sends the ring with one sendmmsg(2) (UDP GSO for
//! runs of equal records); `RxRing::sock_pass` takes a burst with one recvmmsg(2), opens the frame records
//! of the current epoch in place and writes them to the TAP, and hands every other datagram back
//! to Python (control records, other epochs, STUN/DTLS/TURN) by its place in the ring. A frame
//! whose destination MAC has a transit entry (`RxRing::set_transit`) is opened here too, and handed
//! back opened, so Python's transit hook decides where it goes (evio/tunnel/datapath/transit_table.py).
//! With the table's keys instead (`RxRing::set_transit_routes`: destination and source MAC, as the
//! flow matches), such a frame is only noted by its route; Python decides once per route and burst,
//! and the egress's ring seals the run from where it lies (`TxRing::seal_routed`, decision 0069).
//!
//! Records are byte-identical to evio/tunnel/datapath/record.py: kind(1) | epoch(1) | counter(8, BE) |
//! AEAD(frame) | tag(16), the header as associated data, nonce = IV with the counter XORed into
//! its last 8 bytes. Everything read from the socket is untrusted: lengths are checked before
//! any slice, nothing here panics on input, and every drop is counted.

use std::io;

use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::Aes256Gcm;
use chacha20poly1305::ChaCha20Poly1305;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};
use pyo3::types::PyBytes;

#[cfg(target_arch = "x86_64")]
mod gcm;
mod tso;

const KIND_FRAME: u8 = 0x70;
const KIND_CONTROL: u8 = 0x71;
const HEADER_LEN: usize = 10;
const TAG_LEN: usize = 16;
const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
const ETHERNET_HEADER_LEN: usize = 14;
const MIN_FRAME_RECORD: usize = OVERHEAD + ETHERNET_HEADER_LEN;
const VNET_HDR_LEN: usize = 10;
const VNET_F_NEEDS_CSUM: u8 = 1;
const VNET_GSO_NONE: u8 = 0;
const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
const UDP_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 65000;
const CMSG_SPACE: usize = 24; // cmsghdr (16) + u16, aligned to 8
const MAC_LEN: usize = 6;
/// With TSO, a rekey comes this many counters early, so a super-frame (at most 64 KiB in ~47
/// segments at an MTU of 1500) is not cut short by the limit.
const TSO_COUNTER_RESERVE: u64 = 64;
/// A TSO read: vnet header, Ethernet (and a VLAN tag) and an IP packet of up to 64 KiB, and room
/// to spare (a read that fills it is refused as possibly cut short).
const TSO_READ_LEN: usize = VNET_HDR_LEN + ETHERNET_HEADER_LEN + 4 + 65536 + 256;
/// As many destinations as the transit table has entries at most (transit.MAX_ENTRIES).
const MAX_TRANSIT_DESTINATIONS: usize = 4096;
/// A transit route's key: the frame's destination and source MAC, its first 12 bytes.
const ROUTE_KEY_LEN: usize = 12;
type RouteKey = [u8; ROUTE_KEY_LEN];
/// What a leftover is: a datagram for the socket's owner, a record to open, an opened frame.
const LEFT_DATAGRAM: u8 = 0;
const LEFT_RECORD: u8 = 1;
const LEFT_FRAME: u8 = 2;

enum Cipher {
    #[cfg(target_arch = "x86_64")]
    AesFast(Box<gcm::FastGcm>), // gcm.rs: the same bytes, GHASH four blocks at a time
    Aes(Box<Aes256Gcm>),
    ChaCha(Box<ChaCha20Poly1305>),
}

/// One direction's key and IV for one epoch.
#[pyclass(frozen, module = "evio_native")]
struct Aead {
    cipher: Cipher,
    iv: [u8; 12],
}

impl Aead {
    fn nonce(&self, counter: u64) -> [u8; 12] {
        let mut n = self.iv;
        let low = u64::from_be_bytes(n[4..12].try_into().unwrap()) ^ counter;
        n[4..12].copy_from_slice(&low.to_be_bytes());
        n
    }

    /// Seal `buf` in place; the tag goes to `tag`.
    fn seal(&self, counter: u64, aad: &[u8], buf: &mut [u8], tag: &mut [u8]) -> bool {
        let nonce = self.nonce(counter);
        #[cfg(target_arch = "x86_64")]
        if let Cipher::AesFast(c) = &self.cipher {
            tag.copy_from_slice(&c.seal(&nonce, aad, buf));
            return true;
        }
        let nonce = GenericArray::from_slice(&nonce);
        let t = match &self.cipher {
            #[cfg(target_arch = "x86_64")]
            Cipher::AesFast(_) => unreachable!(),
            Cipher::Aes(c) => c.encrypt_in_place_detached(nonce, aad, buf),
            Cipher::ChaCha(c) => c.encrypt_in_place_detached(nonce, aad, buf),
        };
        match t {
            Ok(t) => {
                tag.copy_from_slice(&t);
                true
            }
            Err(_) => false,
        }
    }

    /// Open `buf` in place against `tag`; false when it does not authenticate (buf is then garbage).
    fn open(&self, counter: u64, aad: &[u8], buf: &mut [u8], tag: &[u8]) -> bool {
        let nonce = self.nonce(counter);
        #[cfg(target_arch = "x86_64")]
        if let Cipher::AesFast(c) = &self.cipher {
            return c.open(&nonce, aad, buf, tag);
        }
        let nonce = GenericArray::from_slice(&nonce);
        let tag = GenericArray::from_slice(tag);
        match &self.cipher {
            #[cfg(target_arch = "x86_64")]
            Cipher::AesFast(_) => unreachable!(),
            Cipher::Aes(c) => c.decrypt_in_place_detached(nonce, aad, buf, tag).is_ok(),
            Cipher::ChaCha(c) => c.decrypt_in_place_detached(nonce, aad, buf, tag).is_ok(),
        }
    }
}

/// AES-256-GCM: gcm.rs's where the CPU has its instructions, else the `aes-gcm` crate's.
fn aes_256_gcm(key: &[u8; 32]) -> Cipher {
    #[cfg(target_arch = "x86_64")]
    if let Some(fast) = gcm::FastGcm::new(key) {
        return Cipher::AesFast(Box::new(fast));
    }
    Cipher::Aes(Box::new(Aes256Gcm::new_from_slice(key).unwrap()))
}

#[pymethods]
impl Aead {
    #[new]
    fn new(cipher: &str, key: &[u8], iv: &[u8]) -> PyResult<Self> {
        if key.len() != 32 || iv.len() != 12 {
            return Err(PyValueError::new_err("key must be 32 bytes and iv 12"));
        }
        let cipher = match cipher {
            "aes-256-gcm" => aes_256_gcm(key.try_into().unwrap()),
            "chacha20-poly1305" => Cipher::ChaCha(Box::new(ChaCha20Poly1305::new_from_slice(key).unwrap())),
            _ => return Err(PyValueError::new_err(format!("unknown cipher {cipher}"))),
        };
        Ok(Aead { cipher, iv: iv.try_into().unwrap() })
    }

    /// One whole record (allocating; tests and tools).
    fn seal_record<'py>(&self, py: Python<'py>, kind: u8, epoch: u8, counter: u64, plaintext: &[u8]) -> Bound<'py, PyBytes> {
        let mut rec = vec![0u8; OVERHEAD + plaintext.len()];
        rec[0] = kind;
        rec[1] = epoch;
        rec[2..10].copy_from_slice(&counter.to_be_bytes());
        rec[HEADER_LEN..HEADER_LEN + plaintext.len()].copy_from_slice(plaintext);
        let (head, rest) = rec.split_at_mut(HEADER_LEN);
        let (body, tag) = rest.split_at_mut(plaintext.len());
        self.seal(counter, head, body, tag);
        PyBytes::new(py, &rec)
    }

    /// The plaintext of a whole record, or None for anything that is not one sealed with this key.
    fn open_record<'py>(&self, py: Python<'py>, record: &[u8]) -> Option<Bound<'py, PyBytes>> {
        if record.len() < OVERHEAD || (record[0] != KIND_FRAME && record[0] != KIND_CONTROL) {
            return None;
        }
        let counter = u64::from_be_bytes(record[2..10].try_into().unwrap());
        let mut body = record[HEADER_LEN..record.len() - TAG_LEN].to_vec();
        let tag = &record[record.len() - TAG_LEN..];
        if self.open(counter, &record[..HEADER_LEN], &mut body, tag) {
            Some(PyBytes::new(py, &body))
        } else {
            None
        }
    }
}

const BLOCK_BITS: u64 = 64;

/// Sliding anti-replay window (RFC 6479), the same as evio/tunnel/datapath/replay.py, so the Python slow
/// path and the native pass share one window per epoch.
#[pyclass(module = "evio_native")]
struct ReplayWindow {
    bitmap: Vec<u64>,
    size: u64,
    top: i128,
}

impl ReplayWindow {
    fn verdict(&self, counter: u64) -> u8 {
        let c = counter as i128;
        if c > self.top {
            return 0;
        }
        if self.top - c >= self.size as i128 {
            return 2;
        }
        let blocks = self.bitmap.len() as u64;
        if (self.bitmap[((counter >> 6) % blocks) as usize] >> (counter & 63)) & 1 == 1 {
            return 1;
        }
        0
    }

    fn mark(&mut self, counter: u64) {
        let blocks = self.bitmap.len() as u64;
        if counter as i128 > self.top {
            let top_block: i128 = self.top >> 6; // -1 >> 6 == -1, as in Python
            let jump = (counter >> 6) as i128 - top_block;
            let n = jump.min(blocks as i128);
            for i in 1..=n {
                let b = (top_block + i).rem_euclid(blocks as i128) as usize;
                self.bitmap[b] = 0;
            }
            self.top = counter as i128;
        }
        self.bitmap[((counter >> 6) % blocks) as usize] |= 1 << (counter & 63);
    }
}

#[pymethods]
impl ReplayWindow {
    #[new]
    #[pyo3(signature = (size = 2048))]
    fn new(size: u64) -> PyResult<Self> {
        if size == 0 || size % BLOCK_BITS != 0 {
            return Err(PyValueError::new_err("window size must be a positive multiple of 64"));
        }
        Ok(ReplayWindow { bitmap: vec![0; (size / BLOCK_BITS + 1) as usize], size, top: -1 })
    }

    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    #[getter]
    fn top(&self) -> i128 {
        self.top
    }

    /// 0 accept, 1 replayed, 2 stale (replay.py's ACCEPT, REPLAYED, STALE).
    fn check(&self, counter: u64) -> u8 {
        self.verdict(counter)
    }

    fn update(&mut self, counter: u64) {
        self.mark(counter)
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Complete a partial checksum the kernel left (virtio-net NEEDS_CSUM): the one's complement sum
/// from `start` to the end, folded, stored at `start + offset`. False when the offsets are out of the frame.
fn complete_checksum(frame: &mut [u8], start: usize, offset: usize) -> bool {
    if start >= frame.len() || start + offset + 2 > frame.len() {
        return false;
    }
    let mut sum: u64 = 0;
    let data = &frame[start..];
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u64;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u64) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let csum = !(sum as u16);
    frame[start + offset..start + offset + 2].copy_from_slice(&csum.to_be_bytes());
    true
}

const ETH_TYPE_IPV4: u16 = 0x0800;
const ETH_TYPE_IPV6: u16 = 0x86DD;
const IPV4_MIN_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const TCP_MIN_HEADER_LEN: usize = 20;
const TCP_CHECKSUM_AT: usize = 16;
const PROTO_TCP: u8 = 6;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
const VNET_GSO_TCPV4: u8 = 1;
const VNET_GSO_TCPV6: u8 = 4;
/// An IPv4 total length or IPv6 payload length fits 16 bits: a coalesced frame stays under it.
const MAX_IP_PAYLOAD: usize = 65535;

/// The 16-bit ones' complement sum of `data` (an odd tail padded with zero), folded, not inverted.
fn ones_sum(data: &[u8]) -> u64 {
    let mut sum: u64 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u64;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u64) << 8;
    }
    fold(sum)
}

fn fold(mut sum: u64) -> u64 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

fn be16(b: &[u8], at: usize) -> usize {
    u16::from_be_bytes([b[at], b[at + 1]]) as usize
}

/// The TCP layout of a frame that could join or start a run: a data segment over IPv4 (no fragment)
/// or IPv6 (no extension headers), only ACK (and PSH) set, its IP length exactly the frame's.
/// (ipv6, tcp header offset, payload offset), as `TcpCoalescer._candidate` (evio/tunnel/datapath/offload.py).
fn tcp_candidate(f: &[u8]) -> Option<(bool, usize, usize)> {
    let n = f.len();
    if n < ETHERNET_HEADER_LEN + IPV4_MIN_HEADER_LEN + TCP_MIN_HEADER_LEN {
        return None;
    }
    let ip = ETHERNET_HEADER_LEN;
    let (ipv6, tcp) = match be16(f, 12) as u16 {
        ETH_TYPE_IPV4 => {
            let ihl = (f[ip] & 0x0f) as usize * 4;
            if f[ip] >> 4 != 4 || ihl < IPV4_MIN_HEADER_LEN || be16(f, ip + 6) & 0x3fff != 0 || f[ip + 9] != PROTO_TCP {
                return None;
            }
            (false, ip + ihl)
        }
        ETH_TYPE_IPV6 => {
            if n < ip + IPV6_HEADER_LEN || f[ip] >> 4 != 6 || f[ip + 6] != PROTO_TCP {
                return None;
            }
            (true, ip + IPV6_HEADER_LEN)
        }
        _ => return None,
    };
    if n < tcp + TCP_MIN_HEADER_LEN {
        return None;
    }
    let payload_at = tcp + (f[tcp + 12] >> 4) as usize * 4;
    if payload_at < tcp + TCP_MIN_HEADER_LEN || payload_at >= n || f[tcp + 13] & !TCP_PSH != TCP_ACK {
        return None; // a bad header, no payload (a pure ACK), or other flags: passed through
    }
    let ip_len_ok = if ipv6 { be16(f, ip + 4) == n - ip - IPV6_HEADER_LEN } else { be16(f, ip + 2) == n - ip };
    if !ip_len_ok {
        return None;
    }
    Some((ipv6, tcp, payload_at))
}

/// Joins consecutive TCP segments of one stream opened in a pass into a super-frame with a vnet
/// header, as GRO does: `TcpCoalescer` (evio/tunnel/datapath/offload.py) ported, same rules and the same
/// bytes written. A frame that does not join goes out alone behind an empty vnet header.
struct Coalescer {
    buf: Vec<u8>,
    held: usize,
    end: usize,
    header_len: usize,
    tcp: usize,
    ipv6: bool,
    size: usize, // payload of the run's first segment: the GSO size
    next_seq: u32,
    open: bool, // whether another segment may still join
    psh: bool,
    mask: Vec<u8>, // the header bits that must match the run's first segment
    key: Vec<u8>,
    ip_len_at: usize,
    ip_len_base: usize,
    writes: usize,
    gro_writes: usize,
    failed: usize,
}

impl Coalescer {
    fn new() -> Self {
        Coalescer {
            buf: vec![0; VNET_HDR_LEN + ETHERNET_HEADER_LEN + IPV6_HEADER_LEN + MAX_IP_PAYLOAD],
            held: 0, end: 0, header_len: 0, tcp: 0, ipv6: false, size: 0, next_seq: 0, open: false, psh: false,
            mask: Vec::new(), key: Vec::new(), ip_len_at: 0, ip_len_base: 0, writes: 0, gro_writes: 0, failed: 0,
        }
    }

    fn add(&mut self, tap_fd: i32, f: &[u8]) {
        let n = f.len();
        if self.open && n > self.header_len && n - self.header_len <= self.size {
            // The common case: one masked comparison of the header (which also pins the layout).
            let hl = self.header_len;
            let payload = n - hl;
            let same = f[..hl].iter().zip(&self.mask).zip(&self.key).all(|((b, m), k)| b & m == *k);
            let tcp = self.tcp;
            if same
                && be16(f, self.ip_len_at) == n - self.ip_len_base
                && u32::from_be_bytes(f[tcp + 4..tcp + 8].try_into().unwrap()) == self.next_seq
                && self.end - VNET_HDR_LEN - ETHERNET_HEADER_LEN + payload <= MAX_IP_PAYLOAD
            {
                self.buf[self.end..self.end + payload].copy_from_slice(&f[hl..]);
                self.end += payload;
                self.held += 1;
                self.next_seq = self.next_seq.wrapping_add(payload as u32);
                let psh = f[tcp + 13] & TCP_PSH != 0;
                if psh || payload < self.size {
                    self.open = false;
                    self.psh = psh;
                }
                return;
            }
        }
        let layout = tcp_candidate(f);
        self.flush(tap_fd);
        match layout {
            None => {
                let zero = [0u8; VNET_HDR_LEN];
                let iov = [
                    libc::iovec { iov_base: zero.as_ptr() as *mut libc::c_void, iov_len: VNET_HDR_LEN },
                    libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: n },
                ];
                self.count_write(unsafe { libc::writev(tap_fd, iov.as_ptr(), 2) }, false);
            }
            Some((ipv6, tcp, payload_at)) => self.start_run(f, ipv6, tcp, payload_at),
        }
    }

    fn start_run(&mut self, f: &[u8], ipv6: bool, tcp: usize, payload_at: usize) {
        let n = f.len();
        self.buf[VNET_HDR_LEN..VNET_HDR_LEN + n].copy_from_slice(f);
        self.end = VNET_HDR_LEN + n;
        self.held = 1;
        self.header_len = payload_at;
        self.tcp = tcp;
        self.ipv6 = ipv6;
        self.size = n - payload_at;
        self.next_seq = u32::from_be_bytes(f[tcp + 4..tcp + 8].try_into().unwrap()).wrapping_add(self.size as u32);
        self.psh = f[tcp + 13] & TCP_PSH != 0;
        self.open = !self.psh;
        // Bytes that may differ between segments of one run: IP length (and IPv4 id and header
        // checksum), TCP sequence number and checksum, and the PSH bit.
        let ip = ETHERNET_HEADER_LEN;
        let mut mask = vec![0xffu8; payload_at];
        let mut clear = |at: usize, len: usize| mask[at..at + len].fill(0);
        if ipv6 {
            (self.ip_len_at, self.ip_len_base) = (ip + 4, ip + IPV6_HEADER_LEN);
            clear(ip + 4, 2);
        } else {
            (self.ip_len_at, self.ip_len_base) = (ip + 2, ip);
            clear(ip + 2, 4);
            clear(ip + 10, 2);
        }
        clear(tcp + 4, 4);
        clear(tcp + TCP_CHECKSUM_AT, 2);
        mask[tcp + 13] = !TCP_PSH;
        self.key = f[..payload_at].iter().zip(&mask).map(|(b, m)| b & m).collect();
        self.mask = mask;
    }

    /// Write what is held: one segment behind an empty vnet header, a run as a super-frame with
    /// its IP length and header checksum, the pseudo-header sum as a partial TCP checksum, and GSO.
    fn flush(&mut self, tap_fd: i32) {
        if self.held == 0 {
            return;
        }
        let held = self.held;
        self.held = 0;
        self.open = false;
        let end = self.end;
        if held == 1 {
            self.buf[..VNET_HDR_LEN].fill(0);
            let w = unsafe { libc::write(tap_fd, self.buf.as_ptr() as *const libc::c_void, end) };
            self.count_write(w, false);
            return;
        }
        let base = VNET_HDR_LEN;
        let ip = base + ETHERNET_HEADER_LEN;
        let frame_len = end - base;
        let v = &mut self.buf;
        let (tcp, pseudo) = if self.ipv6 {
            let l4_len = frame_len - ETHERNET_HEADER_LEN - IPV6_HEADER_LEN;
            v[ip + 4..ip + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            (ip + IPV6_HEADER_LEN, ones_sum(&v[ip + 8..ip + 40]) + PROTO_TCP as u64 + l4_len as u64)
        } else {
            let l3 = (v[ip] & 0x0f) as usize * 4;
            let l4_len = frame_len - ETHERNET_HEADER_LEN - l3;
            v[ip + 2..ip + 4].copy_from_slice(&((frame_len - ETHERNET_HEADER_LEN) as u16).to_be_bytes());
            v[ip + 10..ip + 12].fill(0);
            let mut csum = !(ones_sum(&v[ip..ip + l3]) as u16);
            if csum == 0 {
                csum = 0xffff; // as the Python side's finish() (and skb_checksum_help)
            }
            v[ip + 10..ip + 12].copy_from_slice(&csum.to_be_bytes());
            (ip + l3, ones_sum(&v[ip + 12..ip + 20]) + PROTO_TCP as u64 + l4_len as u64)
        };
        if self.psh {
            v[tcp + 13] |= TCP_PSH;
        }
        // CHECKSUM_PARTIAL: the field holds the pseudo-header sum over the whole length, not inverted.
        v[tcp + TCP_CHECKSUM_AT..tcp + TCP_CHECKSUM_AT + 2].copy_from_slice(&(fold(pseudo) as u16).to_be_bytes());
        v[0] = VNET_F_NEEDS_CSUM;
        v[1] = if self.ipv6 { VNET_GSO_TCPV6 } else { VNET_GSO_TCPV4 };
        v[2..4].copy_from_slice(&(self.header_len as u16).to_le_bytes());
        v[4..6].copy_from_slice(&(self.size as u16).to_le_bytes());
        v[6..8].copy_from_slice(&((tcp - base) as u16).to_le_bytes());
        v[8..10].copy_from_slice(&(TCP_CHECKSUM_AT as u16).to_le_bytes());
        let w = unsafe { libc::write(tap_fd, v.as_ptr() as *const libc::c_void, end) };
        self.count_write(w, true);
    }

    fn count_write(&mut self, written: isize, gso: bool) {
        self.writes += 1;
        if gso {
            self.gro_writes += 1;
        }
        if written < 0 {
            self.failed += 1;
        }
    }
}

/// Zeroed memory as an anonymous private mapping: its pages take memory when first written, not
/// when made (a zeroed heap allocation is memset by the allocator when it reuses freed memory, so
/// an idle tunnel's whole send ring was resident), and `release` hands the written ones back.
struct Pages {
    ptr: *mut u8,
    len: usize,
}

// The mapping is owned by one TxRing, used under `&mut self` only.
unsafe impl Send for Pages {}
unsafe impl Sync for Pages {}

impl Pages {
    fn new(len: usize) -> io::Result<Self> {
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Pages { ptr: ptr as *mut u8, len })
    }

    /// The written pages go back to the kernel; the mapping stays and reads as zeros again.
    fn release(&mut self) {
        unsafe { libc::madvise(self.ptr as *mut libc::c_void, self.len, libc::MADV_DONTNEED) };
    }

    /// Bytes of the mapping in memory (mincore(2)).
    fn resident(&self) -> usize {
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let mut pages = vec![0u8; self.len.div_ceil(page)];
        if unsafe { libc::mincore(self.ptr as *mut libc::c_void, self.len, pages.as_mut_ptr()) } != 0 {
            return self.len;
        }
        pages.iter().filter(|p| *p & 1 != 0).count() * page
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

impl std::ops::Deref for Pages {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for Pages {
    fn deref_mut(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// TAP -> underlay: a ring of record slots to one destination, sealed and sent per burst.
#[pyclass(module = "evio_native")]
struct TxRing {
    slots: usize,
    slot_size: usize,
    hoff: usize,
    channel: Option<u16>,
    max_frame: usize,
    vnet: bool,
    gso: bool,
    /// The TAP has TSO: reads go to `scratch` (a super-frame is up to 64 KiB), cut into the slots.
    tso: Option<Pages>,
    /// Super-frames cut since `take_gso_reads` last asked.
    gso_reads: usize,
    ring: Pages,
    lens: Vec<usize>,
    dest: Vec<u8>,
    // Path MTU (evio.tunnel.pmtu): frames over path_frame but within max_frame are held, at most
    // TOO_BIG_HELD a pass (the rest counted), for Python to answer with ICMP (too_big.py).
    path_frame: usize,
    too_big: Vec<Vec<u8>>,
    too_big_overflow: usize,
    /// `bind`'s arguments: the event loop calls the ring itself (`__call__`), no Python frame per pass.
    binding: Option<TxBinding>,
    /// The next counter to seal with, while bound (Python reads and sets it: control records).
    counter: u64,
    /// What the bound passes sent with nothing for Python: (records, bytes, TAP reads with `vnet`).
    totals: [usize; 3],
}

/// What a bound TxRing's pass runs with (`TxRing::bind`).
struct TxBinding {
    tap_fd: i32,
    sock_fd: i32,
    aead: Py<Aead>,
    epoch: u8,
    limit: u64,
    /// Called with `tap_pass`'s tuple when a pass has anything but records sent (drops, an error,
    /// the counter at its limit, frames over the path held): Python counts and answers it.
    fallback: PyObject,
}

const TOO_BIG_HELD: usize = 64;

/// `seal_routed`'s answer: (sent, nbytes, counter, send_failed, gso_refused, done, at_limit, left).
type SealRoutedResult = (usize, usize, u64, usize, bool, usize, bool, Vec<(usize, usize)>);

struct TxResult {
    sent: usize,
    nbytes: usize,
    counter: u64,
    oversized: usize,
    bad_offload: usize,
    send_failed: usize,
    reads: usize,
    error: i32,
    at_limit: bool,
    gso_refused: bool,
}

impl TxRing {
    /// Send slots 0..count; returns how many datagrams left.
    fn send(&mut self, sock_fd: i32, count: usize, refused: &mut bool) -> usize {
        if count == 0 {
            return 0;
        }
        let base = self.ring.as_mut_ptr();
        let mut iov: Vec<libc::iovec> = (0..count)
            .map(|i| libc::iovec { iov_base: unsafe { base.add(i * self.slot_size) } as *mut libc::c_void, iov_len: self.lens[i] })
            .collect();
        let name = self.dest.as_mut_ptr() as *mut libc::c_void;
        let namelen = self.dest.len() as libc::socklen_t;
        let msg = |iov: *mut libc::iovec, iovlen: usize| {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = name;
            m.msg_hdr.msg_namelen = namelen;
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = iovlen as _;
            m
        };
        if self.gso && count > 1 {
            // Runs of equal records (a shorter one may end a run) as one UDP_SEGMENT message each.
            let mut cmsgs = vec![0u8; count * CMSG_SPACE];
            let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(count);
            let mut groups: Vec<usize> = Vec::with_capacity(count);
            let mut i = 0;
            while i < count {
                let size = self.lens[i];
                let end = count.min(i + UDP_MAX_SEGMENTS.min(GSO_MAX_BYTES.checked_div(size).unwrap_or(1)));
                let mut j = i + 1;
                while j < end && self.lens[j] == size {
                    j += 1;
                }
                if j < end && self.lens[j] < size {
                    j += 1;
                }
                let mut m = msg(unsafe { iov.as_mut_ptr().add(i) }, j - i);
                if j - i > 1 {
                    let at = msgs.len() * CMSG_SPACE;
                    let c = &mut cmsgs[at..at + CMSG_SPACE];
                    c[0..8].copy_from_slice(&18u64.to_ne_bytes()); // CMSG_LEN(2)
                    c[8..12].copy_from_slice(&SOL_UDP.to_ne_bytes());
                    c[12..16].copy_from_slice(&UDP_SEGMENT.to_ne_bytes());
                    c[16..18].copy_from_slice(&(size as u16).to_ne_bytes());
                    m.msg_hdr.msg_control = unsafe { cmsgs.as_mut_ptr().add(at) } as *mut libc::c_void;
                    m.msg_hdr.msg_controllen = CMSG_SPACE as _;
                }
                msgs.push(m);
                groups.push(j - i);
                i = j;
            }
            let sent = unsafe { libc::sendmmsg(sock_fd, msgs.as_mut_ptr(), msgs.len() as u32, 0) };
            if sent >= 0 {
                return groups[..sent as usize].iter().sum();
            }
            let err = errno();
            if ![libc::EIO, libc::EINVAL, libc::ENOPROTOOPT, libc::EOPNOTSUPP].contains(&err) {
                return 0;
            }
            // Refused by this route or kernel: one datagram per message from now on.
            self.gso = false;
            *refused = true;
        }
        let mut msgs: Vec<libc::mmsghdr> = (0..count).map(|i| msg(unsafe { iov.as_mut_ptr().add(i) }, 1)).collect();
        let sent = unsafe { libc::sendmmsg(sock_fd, msgs.as_mut_ptr(), count as u32, 0) };
        sent.max(0) as usize
    }

    #[allow(clippy::too_many_arguments)]
    fn pass(&mut self, tap_fd: i32, sock_fd: i32, aead: &Aead, epoch: u8, mut counter: u64, limit: u64, reads_max: usize) -> TxResult {
        let mut r = TxResult {
            sent: 0, nbytes: 0, counter, oversized: 0, bad_offload: 0, send_failed: 0, reads: 0, error: 0,
            at_limit: false, gso_refused: false,
        };
        let mut slot = 0;
        let mut vnet = [0u8; VNET_HDR_LEN];
        // Room for a frame one byte over the limit, so an oversized read is seen as such.
        let room = self.slot_size - self.hoff - HEADER_LEN;
        while r.reads < reads_max && slot < self.slots {
            if counter >= limit {
                r.at_limit = true;
                break;
            }
            if self.tso.is_some() {
                if counter > 0 && limit - counter < TSO_COUNTER_RESERVE {
                    // Rekey before a super-frame could run out of counters halfway.
                    r.at_limit = true;
                    break;
                }
                match self.tso_read(tap_fd, sock_fd, aead, epoch, &mut counter, limit, &mut slot, &mut r) {
                    Ok(()) => continue,
                    Err(()) => break,
                }
            }
            let at = slot * self.slot_size + self.hoff;
            let body = unsafe { self.ring.as_mut_ptr().add(at + HEADER_LEN) } as *mut libc::c_void;
            let n = if self.vnet {
                let iov = [
                    libc::iovec { iov_base: vnet.as_mut_ptr() as *mut libc::c_void, iov_len: VNET_HDR_LEN },
                    libc::iovec { iov_base: body, iov_len: room },
                ];
                unsafe { libc::readv(tap_fd, iov.as_ptr(), 2) }
            } else {
                unsafe { libc::read(tap_fd, body, room) }
            };
            if n < 0 {
                let err = errno();
                if err != libc::EAGAIN && err != libc::EINTR {
                    r.error = err;
                }
                break;
            }
            r.reads += 1;
            let mut n = n as usize;
            if self.vnet {
                if n < VNET_HDR_LEN + ETHERNET_HEADER_LEN || vnet[1] != VNET_GSO_NONE {
                    // A super-frame needs segmentation (tunnel.tso), which this ring does not do.
                    r.bad_offload += 1;
                    continue;
                }
                n -= VNET_HDR_LEN;
            }
            if n > self.max_frame {
                r.oversized += 1;
                continue;
            }
            if n > self.path_frame {
                if self.too_big.len() < TOO_BIG_HELD {
                    self.too_big.push(self.ring[at + HEADER_LEN..at + HEADER_LEN + n].to_vec());
                } else {
                    self.too_big_overflow += 1;
                }
                continue;
            }
            let frame = &mut self.ring[at + HEADER_LEN..at + HEADER_LEN + n];
            if self.vnet && vnet[0] & VNET_F_NEEDS_CSUM != 0 {
                let start = u16::from_le_bytes([vnet[6], vnet[7]]) as usize;
                let offset = u16::from_le_bytes([vnet[8], vnet[9]]) as usize;
                if !complete_checksum(frame, start, offset) {
                    r.bad_offload += 1;
                    continue;
                }
            }
            self.seal_slot(slot, n, aead, epoch, counter);
            counter += 1;
            slot += 1;
            r.nbytes += n;
        }
        r.counter = counter;
        self.send_slots(sock_fd, slot, &mut r);
        r
    }

    /// Seal the frame of `n` bytes in `slot` as record `counter` (and its ChannelData header).
    fn seal_slot(&mut self, slot: usize, n: usize, aead: &Aead, epoch: u8, counter: u64) {
        let at = slot * self.slot_size + self.hoff;
        let rec = &mut self.ring[at..at + OVERHEAD + n];
        rec[0] = KIND_FRAME;
        rec[1] = epoch;
        rec[2..10].copy_from_slice(&counter.to_be_bytes());
        let (head, rest) = rec.split_at_mut(HEADER_LEN);
        let (body, tag) = rest.split_at_mut(n);
        aead.seal(counter, head, body, tag);
        if let Some(ch) = self.channel {
            let s = at - self.hoff;
            self.ring[s..s + 2].copy_from_slice(&ch.to_be_bytes());
            self.ring[s + 2..s + 4].copy_from_slice(&((n + OVERHEAD) as u16).to_be_bytes());
        }
        self.lens[slot] = self.hoff + OVERHEAD + n;
    }

    /// Send slots 0..count and count what went (and what did not) into `r`.
    fn send_slots(&mut self, sock_fd: i32, count: usize, r: &mut TxResult) {
        if count == 0 {
            return;
        }
        let mut refused = false;
        let sent = self.send(sock_fd, count, &mut refused);
        r.gso_refused |= refused;
        if sent < count {
            r.send_failed += count - sent;
            r.nbytes -= (sent..count).map(|i| self.lens[i] - self.hoff - OVERHEAD).sum::<usize>();
        }
        r.sent += sent;
    }

    /// One read from a TSO TAP: a frame goes to the next slot; a super-frame is cut into segments
    /// (tso.rs) in as many slots, the ring sent whenever it fills. Err: stop the pass (nothing to read,
    /// or the TAP failed: `r.error`).
    #[allow(clippy::too_many_arguments)]
    fn tso_read(
        &mut self, tap_fd: i32, sock_fd: i32, aead: &Aead, epoch: u8, counter: &mut u64, limit: u64, slot: &mut usize,
        r: &mut TxResult,
    ) -> Result<(), ()> {
        let mut scratch = self.tso.take().expect("a TSO ring");
        let n = unsafe { libc::read(tap_fd, scratch.as_mut_ptr() as *mut libc::c_void, scratch.len()) };
        let result = if n < 0 {
            let err = errno();
            if err != libc::EAGAIN && err != libc::EINTR {
                r.error = err;
            }
            Err(())
        } else {
            r.reads += 1;
            if n as usize == scratch.len() {
                // Filled to the last byte: maybe cut short, and segments of it would carry valid checksums.
                r.bad_offload += 1;
            } else {
                self.tso_frame(&mut scratch[..n as usize], sock_fd, aead, epoch, counter, limit, slot, r);
            }
            Ok(())
        };
        self.tso = Some(scratch);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn tso_frame(
        &mut self, read: &mut [u8], sock_fd: i32, aead: &Aead, epoch: u8, counter: &mut u64, limit: u64, slot: &mut usize,
        r: &mut TxResult,
    ) {
        if read.len() < VNET_HDR_LEN + ETHERNET_HEADER_LEN {
            r.bad_offload += 1;
            return;
        }
        let (head, frame) = read.split_at_mut(VNET_HDR_LEN);
        let vnet: [u8; VNET_HDR_LEN] = head.try_into().unwrap();
        if vnet[1] == VNET_GSO_NONE {
            let n = frame.len();
            if n > self.max_frame {
                r.oversized += 1;
                return;
            }
            if n > self.path_frame {
                // Over the path (evio.tunnel.pmtu): held for Python to answer with ICMP, as without TSO.
                if self.too_big.len() < TOO_BIG_HELD {
                    self.too_big.push(frame.to_vec());
                } else {
                    self.too_big_overflow += 1;
                }
                return;
            }
            if vnet[0] & VNET_F_NEEDS_CSUM != 0 {
                let start = u16::from_le_bytes([vnet[6], vnet[7]]) as usize;
                let offset = u16::from_le_bytes([vnet[8], vnet[9]]) as usize;
                if !complete_checksum(frame, start, offset) {
                    r.bad_offload += 1;
                    return;
                }
            }
            let at = *slot * self.slot_size + self.hoff + HEADER_LEN;
            self.ring[at..at + n].copy_from_slice(frame);
            self.seal_slot(*slot, n, aead, epoch, *counter);
            *counter += 1;
            *slot += 1;
            r.nbytes += n;
            return;
        }
        let Some(mut lay) = tso::layout(&vnet, frame) else {
            r.bad_offload += 1;
            return;
        };
        self.gso_reads += 1;
        if lay.header_len + lay.mss > self.max_frame {
            r.oversized += 1;
            return;
        }
        if lay.header_len + lay.mss > self.path_frame && self.path_frame > lay.header_len {
            // The path takes less than the sender's segments (evio.tunnel.pmtu): cut them to fit it. The
            // sender's TCP never needs the ICMP answer, and nothing is lost.
            lay.mss = self.path_frame - lay.header_len;
            lay.segments = (frame.len() - lay.header_len).div_ceil(lay.mss);
        }
        for i in 0..lay.segments {
            if *slot == self.slots {
                self.send_slots(sock_fd, *slot, r);
                *slot = 0;
            }
            if *counter >= limit {
                // Out of counters halfway (a tiny rekey limit): the rest is lost, TCP sends it again.
                r.send_failed += lay.segments - i;
                r.at_limit = true;
                return;
            }
            let at = *slot * self.slot_size + self.hoff + HEADER_LEN;
            let n = tso::write_segment(frame, &lay, i, &mut self.ring[at..at + self.max_frame]);
            self.seal_slot(*slot, n, aead, epoch, *counter);
            *counter += 1;
            *slot += 1;
            r.nbytes += n;
        }
    }
}

#[pymethods]
impl TxRing {
    /// `dest`: the peer's struct sockaddr (mmsg.sockaddr); `hoff`: 4 on a TURN channel, else 0;
    /// `vnet`: TAP reads start with a virtio-net header; `tso`: with it, a read may be a TCP
    /// super-frame, cut here into segments (tso.rs).
    #[new]
    #[pyo3(signature = (slots, max_frame, dest, channel = None, vnet = false, gso = true, tso = false))]
    fn new(slots: usize, max_frame: usize, dest: &[u8], channel: Option<u16>, vnet: bool, gso: bool, tso: bool) -> PyResult<Self> {
        if slots == 0 || !(ETHERNET_HEADER_LEN..=65535 - OVERHEAD - 4).contains(&max_frame) {
            return Err(PyValueError::new_err("bad ring geometry"));
        }
        let hoff = if channel.is_some() { 4 } else { 0 };
        let slot_size = hoff + max_frame + OVERHEAD + 1;
        let os = |e: io::Error| PyOSError::new_err(e.to_string());
        Ok(TxRing {
            slots, slot_size, hoff, channel, max_frame, vnet, gso,
            tso: if vnet && tso { Some(Pages::new(TSO_READ_LEN).map_err(os)?) } else { None },
            gso_reads: 0,
            ring: Pages::new(slots * slot_size).map_err(os)?,
            lens: vec![0; slots], dest: dest.to_vec(),
            path_frame: max_frame, too_big: Vec::new(), too_big_overflow: 0,
            binding: None, counter: 0, totals: [0; 3],
        })
    }

    /// The largest frame the path takes (evio.tunnel.pmtu); larger ones up to `max_frame` are held.
    fn set_path_frame(&mut self, path_frame: usize) {
        self.path_frame = path_frame.min(self.max_frame);
    }

    /// The frames held for being over the path since the last call, and how many more were not held.
    fn take_too_big<'py>(&mut self, py: Python<'py>) -> (Vec<Bound<'py, PyBytes>>, usize) {
        let held = self.too_big.drain(..).map(|f| PyBytes::new(py, &f)).collect();
        (held, std::mem::take(&mut self.too_big_overflow))
    }

    /// Hand the ring's written pages back to the kernel (an idle tunnel, after a burst): every pass
    /// writes each slot it sends in full, so nothing kept in it is lost.
    fn release(&mut self) {
        self.ring.release();
        if let Some(scratch) = self.tso.as_mut() {
            scratch.release();
        }
    }

    /// How many super-frames were cut since the last call.
    fn take_gso_reads(&mut self) -> usize {
        std::mem::take(&mut self.gso_reads)
    }

    /// Whether TAP reads may be super-frames this ring cuts (`tso` with `vnet`).
    #[getter]
    fn tso(&self) -> bool {
        self.tso.is_some()
    }

    /// Bytes of the ring in memory: the pages written since it was made or released.
    fn resident(&self) -> usize {
        self.ring.resident() + self.tso.as_ref().map_or(0, |s| s.resident())
    }

    #[getter]
    fn gso(&self) -> bool {
        self.gso
    }

    /// Drain up to `reads_max` TAP reads into up to `slots` records and send them.
    /// Returns (sent, nbytes, counter, oversized, bad_offload, send_failed, reads, errno, at_limit, gso_refused):
    /// `counter` is the next counter to use; `at_limit`: stopped because `counter` reached `limit`
    /// (rekey, then call again); `errno`: the TAP failed (not EAGAIN).
    #[allow(clippy::too_many_arguments)]
    fn tap_pass(
        &mut self, py: Python<'_>, tap_fd: i32, sock_fd: i32, aead: &Aead, epoch: u8, counter: u64, limit: u64, reads_max: usize,
    ) -> (usize, usize, u64, usize, usize, usize, usize, i32, bool, bool) {
        let r = py.allow_threads(|| self.pass(tap_fd, sock_fd, aead, epoch, counter, limit, reads_max));
        (r.sent, r.nbytes, r.counter, r.oversized, r.bad_offload, r.send_failed, r.reads, r.error, r.at_limit, r.gso_refused)
    }

    /// Bind `tap_pass`'s arguments (the counter apart: `counter`), so that the event loop can call the
    /// ring itself when the TAP is readable: a pass with nothing for Python runs no Python code.
    #[allow(clippy::too_many_arguments)]
    fn bind(&mut self, tap_fd: i32, sock_fd: i32, aead: Py<Aead>, epoch: u8, limit: u64, fallback: PyObject) {
        self.binding = Some(TxBinding { tap_fd, sock_fd, aead, epoch, limit, fallback });
    }

    fn unbind(&mut self) {
        self.binding = None;
    }

    #[getter]
    fn get_counter(&self) -> u64 {
        self.counter
    }

    #[setter]
    fn set_counter(&mut self, counter: u64) {
        self.counter = counter;
    }

    /// (records, bytes, TAP reads) the bound passes sent without Python.
    fn totals(&self) -> (usize, usize, usize) {
        (self.totals[0], self.totals[1], self.totals[2])
    }

    /// One bound pass (at most twice the slots in reads, as Python's); returns how many records went
    /// out. Anything but records sent goes to the binding's fallback, after the ring is released, so
    /// the fallback may use the ring again.
    fn __call__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let py = slf.py();
        let (r, fallback) = {
            let mut this = slf.try_borrow_mut()?;
            let Some(b) = this.binding.as_ref() else { return Ok(0) };
            let (tap_fd, sock_fd, epoch, limit) = (b.tap_fd, b.sock_fd, b.epoch, b.limit);
            let aead = b.aead.clone_ref(py);
            let budget = 2 * this.slots;
            let counter = this.counter;
            let ring: &mut TxRing = &mut this;
            let a: &Aead = aead.get();
            let r = py.allow_threads(|| ring.pass(tap_fd, sock_fd, a, epoch, counter, limit, budget));
            this.counter = r.counter;
            let plain = r.oversized == 0 && r.bad_offload == 0 && r.send_failed == 0 && r.error == 0 && !r.at_limit
                && !r.gso_refused && this.too_big.is_empty() && this.too_big_overflow == 0;
            if plain {
                this.totals[0] += r.sent;
                this.totals[1] += r.nbytes;
                if this.vnet {
                    this.totals[2] += r.reads;
                }
                return Ok(r.sent);
            }
            (r, this.binding.as_ref().map(|b| b.fallback.clone_ref(py)))
        };
        if let Some(fallback) = fallback {
            fallback.call1(py, ((r.sent, r.nbytes, r.counter, r.oversized, r.bad_offload, r.send_failed, r.reads, r.error,
                                  r.at_limit, r.gso_refused),))?;
        }
        Ok(r.sent)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(b) = &self.binding {
            visit.call(&b.aead)?;
            visit.call(&b.fallback)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.binding = None;
    }

    /// Another tunnel's transit frames, as its ring's last pass left them for `route` (from the
    /// `skip`-th on), copied into the slots, sealed and sent (decision 0069). Frames over the path
    /// are not taken. Returns (sent, nbytes, counter, send_failed, gso_refused, done, at_limit, left):
    /// `done` frames of the route were dealt with (sealed, or over the path and listed in `left` as
    /// (start, length) in that ring); `at_limit`: stopped at `limit`, rekey and call again from `done`.
    #[allow(clippy::too_many_arguments)]
    fn seal_routed(
        &mut self, py: Python<'_>, rx: PyRef<'_, RxRing>, route: u16, skip: usize, sock_fd: i32, aead: &Aead, epoch: u8,
        counter: u64, limit: u64,
    ) -> SealRoutedResult {
        let frames: Vec<(usize, usize)> = rx.run_of(route).iter().skip(skip).map(|&(_, start, n)| (start, n)).collect();
        let total = rx.slots * rx.slot_size;
        // As an address, to cross allow_threads: the bytearray is held by `rx` for this call, and
        // Python does not touch it meanwhile (the same contract as RxRing::pass).
        let base = rx.buf.buf_ptr() as usize;
        let (r, done, left) = py.allow_threads(|| {
            let src = unsafe { std::slice::from_raw_parts(base as *const u8, total) };
            self.seal_frames(src, &frames, sock_fd, aead, epoch, counter, limit)
        });
        (r.sent, r.nbytes, r.counter, r.send_failed, r.gso_refused, skip + done, r.at_limit, left)
    }
}

impl TxRing {
    /// `seal_routed`'s loop: the frames at `src[start..start + n]` into the slots, sealed, sent.
    #[allow(clippy::too_many_arguments)]
    fn seal_frames(
        &mut self, src: &[u8], frames: &[(usize, usize)], sock_fd: i32, aead: &Aead, epoch: u8, mut counter: u64,
        limit: u64,
    ) -> (TxResult, usize, Vec<(usize, usize)>) {
        let mut r = TxResult {
            sent: 0, nbytes: 0, counter, oversized: 0, bad_offload: 0, send_failed: 0, reads: 0, error: 0,
            at_limit: false, gso_refused: false,
        };
        let mut left = Vec::new();
        let mut slot = 0;
        let mut done = 0;
        for &(start, n) in frames {
            if start + n > src.len() {
                break; // not the ring's last pass (cannot happen): leave the rest
            }
            if n > self.path_frame {
                // Larger than this tunnel carries: the bridge answers it (as accept_plain refuses it).
                left.push((start, n));
                done += 1;
                continue;
            }
            if counter >= limit {
                r.at_limit = true;
                break;
            }
            if slot == self.slots {
                self.send_slots(sock_fd, slot, &mut r);
                slot = 0;
            }
            let at = slot * self.slot_size + self.hoff + HEADER_LEN;
            self.ring[at..at + n].copy_from_slice(&src[start..start + n]);
            self.seal_slot(slot, n, aead, epoch, counter);
            counter += 1;
            slot += 1;
            r.nbytes += n;
            done += 1;
        }
        r.counter = counter;
        self.send_slots(sock_fd, slot, &mut r);
        (r, done, left)
    }
}

/// Underlay -> TAP: a receive ring (a Python bytearray, so the slow path reads it in place).
#[pyclass(module = "evio_native")]
struct RxRing {
    slots: usize,
    slot_size: usize,
    gro: bool,
    buf: PyBuffer<u8>,
    lens: Vec<usize>,
    segments: Vec<usize>,
    names: Vec<libc::sockaddr_storage>,
    namelens: Vec<libc::socklen_t>,
    controls: Vec<u64>, // CMSG_SPACE bytes per slot, 8-aligned
    transit: Vec<[u8; MAC_LEN]>, // sorted: destinations whose frames go back to Python opened
    transit_all: bool,
    routes: Vec<(RouteKey, u16)>, // sorted by key: frames noted by route for the egress's ring (0069)
    excluded: Vec<u16>,           // ethertypes never routed (the FRB)
    routed: Vec<(u16, usize, usize)>, // the last pass's routed frames: (route, start, length), by route, in order
    runs: Vec<(u16, usize, usize)>,   // where each route's frames are in `routed`: (route, first, count), by route
    coalescer: Option<Box<Coalescer>>, // made on the first pass to a vnet TAP
    /// `bind`'s arguments: the event loop calls the ring itself (`__call__`), no Python frame per pass.
    binding: Option<RxBinding>,
    /// What the bound passes delivered with nothing for Python: (frames, bytes, tap_writes, gro_writes).
    totals: [usize; 4],
}

unsafe impl Send for RxRing {}

/// What a bound RxRing's pass runs with (`RxRing::bind`).
struct RxBinding {
    sock_fd: i32,
    tap_fd: i32,
    aead: Py<Aead>,
    window: Py<ReplayWindow>,
    epoch: u8,
    max_record: usize,
    channel: Option<u16>,
    vnet: bool,
    /// Called with `sock_pass`'s tuple when a pass left anything for Python (drops, leftovers,
    /// transit frames): Python counts and handles it as after `sock_pass`.
    fallback: PyObject,
}

/// What one pass left for Python, by place in the ring: (slot, start, length, LEFT_*).
type Leftover = (usize, usize, usize, u8);

/// `sock_pass`'s answer: (received, frames, nbytes, (truncated, replayed, stale, forged,
/// tap_write_failed), transit, (tap_writes, gro_writes), leftovers).
type SockPassResult = (usize, usize, usize, (usize, usize, usize, usize, usize), usize, (usize, usize), Vec<Leftover>);

#[derive(Default)]
struct RxResult {
    count: usize,
    frames: usize,
    nbytes: usize,
    truncated: usize,
    replayed: usize,
    stale: usize,
    forged: usize,
    tap_write_failed: usize,
    tap_writes: usize, // with a vnet TAP: writes, frames and super-frames
    gro_writes: usize, // super-frames among them
    transit: usize, // opened frames among the leftovers, and those routed
    leftovers: Vec<Leftover>,
    routed: Vec<(u16, usize, usize)>,
}

/// What every datagram of one pass is checked and opened against.
struct RxContext<'a> {
    tap_fd: i32,
    aead: &'a Aead,
    epoch: u8,
    channel: Option<u16>,
    max_record: usize,
    transit: &'a [[u8; MAC_LEN]],
    transit_all: bool,
    routes: &'a [(RouteKey, u16)],
    excluded: &'a [u16],
}

/// One datagram at `buf[start..start + n]` (n within the buffer): a frame record of the epoch is
/// opened in place and written to the TAP; anything else is counted or left for Python.
#[allow(clippy::too_many_arguments)]
fn datagram(
    buf: &mut [u8], slot: usize, start: usize, n: usize, cx: &RxContext, window: &mut ReplayWindow, r: &mut RxResult,
    co: Option<&mut Coalescer>,
) {
    let whole = n;
    let mut n = n;
    let mut hoff = 0;
    if let Some(ch) = cx.channel {
        // Records come as ChannelData on our channel; anything else is the TURN client's.
        if n < 4 || u16::from_be_bytes([buf[start], buf[start + 1]]) != ch {
            r.leftovers.push((slot, start, n, LEFT_DATAGRAM));
            return;
        }
        let size = u16::from_be_bytes([buf[start + 2], buf[start + 3]]) as usize;
        if size > n - 4 {
            r.truncated += 1;
            return;
        }
        if size == 0 || (buf[start + 4] != KIND_FRAME && buf[start + 4] != KIND_CONTROL) {
            r.leftovers.push((slot, start, n, LEFT_DATAGRAM));
            return;
        }
        n = size;
        hoff = 4;
    }
    if n == 0 {
        r.truncated += 1;
        return;
    }
    let at = start + hoff;
    let kind = buf[at];
    if kind != KIND_FRAME || n < 2 || buf[at + 1] != cx.epoch || n > cx.max_record {
        if kind == KIND_FRAME || kind == KIND_CONTROL {
            r.leftovers.push((slot, at, n, LEFT_RECORD));
        } else {
            r.leftovers.push((slot, start, whole, LEFT_DATAGRAM));
        }
        return;
    }
    if n < MIN_FRAME_RECORD {
        r.truncated += 1;
        return;
    }
    let counter = u64::from_be_bytes(buf[at + 2..at + 10].try_into().unwrap());
    match window.verdict(counter) {
        0 => {}
        1 => {
            r.replayed += 1;
            return;
        }
        _ => {
            r.stale += 1;
            return;
        }
    }
    let rec = &mut buf[at..at + n];
    let (head, rest) = rec.split_at_mut(HEADER_LEN);
    let (body, tag) = rest.split_at_mut(n - OVERHEAD);
    if !cx.aead.open(counter, head, body, tag) {
        r.forged += 1;
        return;
    }
    window.mark(counter);
    r.frames += 1;
    r.nbytes += n - OVERHEAD;
    if !cx.routes.is_empty() {
        // At least MIN_FRAME_RECORD: the body holds both MACs and the ethertype.
        let key: RouteKey = body[..ROUTE_KEY_LEN].try_into().unwrap();
        if let Ok(i) = cx.routes.binary_search_by(|e| e.0.cmp(&key)) {
            let ethertype = u16::from_be_bytes([body[ROUTE_KEY_LEN], body[ROUTE_KEY_LEN + 1]]);
            if !cx.excluded.contains(&ethertype) {
                // Left in place for the egress's ring (TxRing::seal_routed), once Python has looked the route up.
                r.transit += 1;
                r.routed.push((cx.routes[i].1, at + HEADER_LEN, n - OVERHEAD));
                return;
            }
        }
    }
    if cx.transit_all || (!cx.transit.is_empty() && cx.transit.binary_search(&body[..MAC_LEN].try_into().unwrap()).is_ok()) {
        // Opened and counted, the window moved: Python only runs the transit hook (or the TAP write).
        r.transit += 1;
        r.leftovers.push((slot, at + HEADER_LEN, n - OVERHEAD, LEFT_FRAME));
        return;
    }
    if let Some(co) = co {
        co.add(cx.tap_fd, body);
        return;
    }
    let written = unsafe { libc::write(cx.tap_fd, body.as_ptr() as *const libc::c_void, body.len()) };
    if written < 0 {
        r.tap_write_failed += 1;
    }
}

impl RxRing {
    /// Keep a pass's routed frames grouped by route (a stable sort keeps each flow's order), so
    /// each run is found in O(log n) however many entries a burst touches.
    fn set_routed(&mut self, mut routed: Vec<(u16, usize, usize)>) {
        routed.sort_by_key(|e| e.0);
        self.runs.clear();
        for (i, e) in routed.iter().enumerate() {
            match self.runs.last_mut() {
                Some(run) if run.0 == e.0 => run.2 += 1,
                _ => self.runs.push((e.0, i, 1)),
            }
        }
        self.routed = routed;
    }

    /// The last pass's frames of `route`, in order.
    fn run_of(&self, route: u16) -> &[(u16, usize, usize)] {
        match self.runs.binary_search_by_key(&route, |run| run.0) {
            Ok(i) => &self.routed[self.runs[i].1..self.runs[i].1 + self.runs[i].2],
            Err(_) => &[],
        }
    }

    fn pass(&mut self, sock_fd: i32, cx: &RxContext, window: &mut ReplayWindow, mut co: Option<&mut Coalescer>) -> RxResult {
        let mut r = RxResult::default();
        let base = self.buf.buf_ptr() as *mut u8;
        let mut iov: Vec<libc::iovec> = (0..self.slots)
            .map(|i| libc::iovec { iov_base: unsafe { base.add(i * self.slot_size) } as *mut libc::c_void, iov_len: self.slot_size })
            .collect();
        let controls = self.controls.as_mut_ptr() as *mut u8;
        let mut msgs: Vec<libc::mmsghdr> = (0..self.slots)
            .map(|i| {
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = &mut self.names[i] as *mut _ as *mut libc::c_void;
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
                m.msg_hdr.msg_iov = &mut iov[i];
                m.msg_hdr.msg_iovlen = 1;
                if self.gro {
                    m.msg_hdr.msg_control = unsafe { controls.add(i * CMSG_SPACE) } as *mut libc::c_void;
                    m.msg_hdr.msg_controllen = CMSG_SPACE as _;
                }
                m
            })
            .collect();
        let got = unsafe { libc::recvmmsg(sock_fd, msgs.as_mut_ptr(), self.slots as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        if got <= 0 {
            return r;
        }
        let count = got as usize;
        r.count = count;
        for (i, m) in msgs.iter().enumerate().take(count) {
            self.lens[i] = (m.msg_len as usize).min(self.slot_size);
            self.namelens[i] = m.msg_hdr.msg_namelen;
            self.segments[i] = 0;
            if self.gro && m.msg_hdr.msg_controllen >= 20 {
                // struct cmsghdr: len (8), level (4), type (4), then the segment size (an int).
                let c = unsafe { std::slice::from_raw_parts(controls.add(i * CMSG_SPACE), CMSG_SPACE) };
                let level = i32::from_ne_bytes(c[8..12].try_into().unwrap());
                let kind = i32::from_ne_bytes(c[12..16].try_into().unwrap());
                let size = i32::from_ne_bytes(c[16..20].try_into().unwrap());
                if level == SOL_UDP && kind == UDP_GRO && size > 0 {
                    self.segments[i] = size as usize;
                }
            }
        }
        // Safety: the bytearray is held (and its buffer exported, so not resizable) for our lifetime,
        // and Python does not touch it while this pass runs.
        let buf = unsafe { std::slice::from_raw_parts_mut(base, self.slots * self.slot_size) };
        for slot in 0..count {
            let start = slot * self.slot_size;
            let total = self.lens[slot];
            let step = self.segments[slot];
            if step == 0 || step >= total {
                datagram(buf, slot, start, total, cx, window, &mut r, co.as_deref_mut());
                continue;
            }
            let mut offset = 0;
            while offset < total {
                datagram(buf, slot, start + offset, step.min(total - offset), cx, window, &mut r, co.as_deref_mut());
                offset += step;
            }
        }
        if let Some(co) = co {
            // Nothing waits for a later burst.
            co.flush(cx.tap_fd);
            r.tap_writes = std::mem::take(&mut co.writes);
            r.gro_writes = std::mem::take(&mut co.gro_writes);
            r.tap_write_failed += std::mem::take(&mut co.failed);
        }
        r
    }
}

#[pymethods]
impl RxRing {
    /// `buffer`: a bytearray of `slots * slot_size` bytes, kept by the caller as the ring's view;
    /// `gro`: the socket has UDP_GRO on, so a message may be a run of datagrams (64 KiB slots).
    #[new]
    #[pyo3(signature = (buffer, slots, slot_size, gro = false))]
    fn new(buffer: &Bound<'_, PyAny>, slots: usize, slot_size: usize, gro: bool) -> PyResult<Self> {
        let buf = PyBuffer::<u8>::get(buffer)?;
        if buf.readonly() || !buf.is_c_contiguous() || buf.len_bytes() < slots * slot_size || slots == 0 || slot_size < 64 {
            return Err(PyValueError::new_err("ring must be a writable contiguous buffer of slots * slot_size bytes"));
        }
        Ok(RxRing {
            slots, slot_size, gro, buf, lens: vec![0; slots], segments: vec![0; slots],
            names: vec![unsafe { std::mem::zeroed() }; slots], namelens: vec![0; slots],
            controls: vec![0; slots * CMSG_SPACE / 8], transit: Vec::new(), transit_all: false,
            routes: Vec::new(), excluded: Vec::new(), routed: Vec::new(), runs: Vec::new(), coalescer: None,
            binding: None, totals: [0; 4],
        })
    }

    /// Frames whose first 12 bytes (destination and source MAC) are one of `keys` (12 bytes each,
    /// concatenated; route i is the i-th) and whose ethertype is not in `excluded` are opened and left
    /// in the ring, noted by route (`take_routes`), for the egress's `TxRing::seal_routed` or the TAP.
    /// Empty: none. Checked before the destinations of `set_transit`.
    #[pyo3(signature = (keys, excluded = Vec::new()))]
    fn set_transit_routes(&mut self, keys: &[u8], excluded: Vec<u16>) -> PyResult<()> {
        if keys.len() % ROUTE_KEY_LEN != 0 || keys.len() / ROUTE_KEY_LEN > MAX_TRANSIT_DESTINATIONS {
            return Err(PyValueError::new_err("keys must be at most 4096 MAC pairs of 12 bytes"));
        }
        let mut routes: Vec<(RouteKey, u16)> =
            keys.chunks_exact(ROUTE_KEY_LEN).enumerate().map(|(i, k)| (k.try_into().unwrap(), i as u16)).collect();
        routes.sort_unstable();
        routes.dedup_by(|a, b| a.0 == b.0);
        self.routes = routes;
        self.excluded = excluded;
        Ok(())
    }

    /// How many keys `set_transit_routes` holds.
    #[getter]
    fn transit_routes(&self) -> usize {
        self.routes.len()
    }

    /// The last pass's routed frames: (route, how many), each route once.
    fn take_routes(&self) -> Vec<(u16, usize)> {
        self.runs.iter().map(|&(route, _, count)| (route, count)).collect()
    }

    /// Where the last pass left the frames of `route`: (start, length) in the ring, in order.
    fn routed_frames(&self, route: u16) -> Vec<(usize, usize)> {
        self.run_of(route).iter().map(|&(_, start, n)| (start, n)).collect()
    }

    /// Frames to these destinations (`dsts`: 6-byte MACs, concatenated) are handed back opened
    /// instead of written to the TAP; `all`: every frame is. Empty and false: none.
    #[pyo3(signature = (dsts, all = false))]
    fn set_transit(&mut self, dsts: &[u8], all: bool) -> PyResult<()> {
        if dsts.len() % MAC_LEN != 0 || dsts.len() / MAC_LEN > MAX_TRANSIT_DESTINATIONS {
            return Err(PyValueError::new_err("dsts must be at most 4096 MAC addresses of 6 bytes"));
        }
        let mut macs: Vec<[u8; MAC_LEN]> = dsts.chunks_exact(MAC_LEN).map(|m| m.try_into().unwrap()).collect();
        macs.sort_unstable();
        macs.dedup();
        self.transit = macs;
        self.transit_all = all;
        Ok(())
    }

    /// How many destinations `set_transit` holds.
    #[getter]
    fn transit_destinations(&self) -> usize {
        self.transit.len()
    }

    /// One burst: frame records of `epoch` opened into the TAP (`vnet`: through the coalescer, TCP
    /// segments joined into super-frames); returns (received, frames, nbytes, (truncated, replayed,
    /// stale, forged, tap_write_failed), transit, (tap_writes, gro_writes), leftovers) where
    /// tap_writes and gro_writes (super-frames among them) are counted with `vnet` only, leftovers are
    /// (slot, start, length, kind) for Python: 0 a datagram for the owner, 1 a record to open the slow
    /// way, 2 a frame opened here (counted in frames, its window moved) for the transit hook;
    /// `transit`: how many of those.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (sock_fd, tap_fd, aead, window, epoch, max_record, channel = None, vnet = false))]
    fn sock_pass(
        &mut self, py: Python<'_>, sock_fd: i32, tap_fd: i32, aead: &Aead, mut window: PyRefMut<'_, ReplayWindow>, epoch: u8,
        max_record: usize, channel: Option<u16>, vnet: bool,
    ) -> SockPassResult {
        let r = self.run_pass(py, sock_fd, tap_fd, aead, &mut window, epoch, max_record, channel, vnet);
        sock_pass_result(r)
    }

    /// Bind `sock_pass`'s arguments, so that the event loop can call the ring itself when the socket
    /// is readable: a pass that leaves nothing for Python runs no Python code.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (sock_fd, tap_fd, aead, window, epoch, max_record, channel, vnet, fallback))]
    fn bind(
        &mut self, sock_fd: i32, tap_fd: i32, aead: Py<Aead>, window: Py<ReplayWindow>, epoch: u8, max_record: usize,
        channel: Option<u16>, vnet: bool, fallback: PyObject,
    ) {
        self.binding = Some(RxBinding { sock_fd, tap_fd, aead, window, epoch, max_record, channel, vnet, fallback });
    }

    fn unbind(&mut self) {
        self.binding = None;
    }

    /// (frames, bytes, tap_writes, gro_writes) the bound passes delivered without Python.
    fn totals(&self) -> (usize, usize, usize, usize) {
        (self.totals[0], self.totals[1], self.totals[2], self.totals[3])
    }

    /// One bound pass; returns how many frames it delivered. A pass that left anything for Python
    /// goes to the binding's fallback after the ring and the window are released (the fallback reads
    /// the ring and may move to the next epoch).
    fn __call__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let py = slf.py();
        let (r, fallback) = {
            let mut this = slf.try_borrow_mut()?;
            let Some(b) = this.binding.as_ref() else { return Ok(0) };
            let (sock_fd, tap_fd, epoch, max_record, channel, vnet) = (b.sock_fd, b.tap_fd, b.epoch, b.max_record, b.channel, b.vnet);
            let aead = b.aead.clone_ref(py);
            let window = b.window.clone_ref(py);
            let mut w = window.bind(py).try_borrow_mut()?;
            let r = this.run_pass(py, sock_fd, tap_fd, aead.get(), &mut w, epoch, max_record, channel, vnet);
            drop(w);
            if r.count == 0 {
                return Ok(0);
            }
            let plain = r.truncated == 0 && r.replayed == 0 && r.stale == 0 && r.forged == 0 && r.tap_write_failed == 0
                && r.transit == 0 && r.leftovers.is_empty();
            if plain {
                this.totals[0] += r.frames;
                this.totals[1] += r.nbytes;
                this.totals[2] += r.tap_writes;
                this.totals[3] += r.gro_writes;
                return Ok(r.frames);
            }
            (r, this.binding.as_ref().map(|b| b.fallback.clone_ref(py)))
        };
        let frames = r.frames;
        if let Some(fallback) = fallback {
            fallback.call1(py, (sock_pass_result(r),))?;
        }
        Ok(frames)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(b) = &self.binding {
            visit.call(&b.aead)?;
            visit.call(&b.window)?;
            visit.call(&b.fallback)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.binding = None;
    }

    fn length(&self, slot: usize) -> usize {
        self.lens.get(slot).copied().unwrap_or(0)
    }

    /// The length of each datagram in message `slot` of the last burst (UDP GRO); 0: one datagram.
    fn segment_size(&self, slot: usize) -> usize {
        self.segments.get(slot).copied().unwrap_or(0)
    }

    /// The source of datagram `slot` of the last burst, as struct sockaddr bytes.
    fn source<'py>(&self, py: Python<'py>, slot: usize) -> PyResult<Bound<'py, PyBytes>> {
        if slot >= self.slots {
            return Err(PyOSError::new_err("no such slot"));
        }
        let len = (self.namelens[slot] as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
        let raw = unsafe { std::slice::from_raw_parts(&self.names[slot] as *const _ as *const u8, len) };
        Ok(PyBytes::new(py, raw))
    }
}

impl RxRing {
    /// `sock_pass`'s work, for it and for the bound pass.
    #[allow(clippy::too_many_arguments)]
    fn run_pass(
        &mut self, py: Python<'_>, sock_fd: i32, tap_fd: i32, aead: &Aead, w: &mut ReplayWindow, epoch: u8, max_record: usize,
        channel: Option<u16>, vnet: bool,
    ) -> RxResult {
        let transit = std::mem::take(&mut self.transit);
        let routes = std::mem::take(&mut self.routes);
        let excluded = std::mem::take(&mut self.excluded);
        let cx = RxContext {
            tap_fd, aead, epoch, channel, max_record, transit: &transit, transit_all: self.transit_all, routes: &routes,
            excluded: &excluded,
        };
        let mut co = if vnet { Some(self.coalescer.take().unwrap_or_else(|| Box::new(Coalescer::new()))) } else { None };
        let mut r = py.allow_threads(|| self.pass(sock_fd, &cx, w, co.as_deref_mut()));
        self.transit = transit;
        self.routes = routes;
        self.excluded = excluded;
        self.set_routed(std::mem::take(&mut r.routed));
        if co.is_some() {
            self.coalescer = co;
        }
        r
    }
}

fn sock_pass_result(r: RxResult) -> SockPassResult {
    (
        r.count, r.frames, r.nbytes, (r.truncated, r.replayed, r.stale, r.forged, r.tap_write_failed), r.transit,
        (r.tap_writes, r.gro_writes), r.leftovers,
    )
}

#[pymodule]
fn evio_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Aead>()?;
    m.add_class::<ReplayWindow>()?;
    m.add_class::<TxRing>()?;
    m.add_class::<RxRing>()?;
    Ok(())
}
