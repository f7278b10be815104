//! TCP segmentation of the TAP's super-frames (TSO), as the kernel's `tcp_gso_segment` does it.
//!
//! With `TUNSETOFFLOAD` (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) a read from the TAP may be one TCP
//! super-frame of up to 64 KiB behind a virtio-net header whose `gso_size` is the MSS. The wire
//! carries only complete frames (docs/decisions/0018), so each is cut here into `gso_size`
//! segments, every one with its own IP length (and IPv4 id and header checksum), sequence
//! number and full TCP checksum; FIN and PSH stay on the last segment only, CWR on the first.
//! The layout is read from the frame, not from the header's `hdr_len` (tun reports the linear
//! part of the skb there, which may include payload). Everything is checked before a slice:
//! what cannot be cut is refused (`None`) and counted by the caller as bad-offload.

use crate::{ETHERNET_HEADER_LEN, ETH_TYPE_IPV4, ETH_TYPE_IPV6, IPV4_MIN_HEADER_LEN, IPV6_HEADER_LEN, PROTO_TCP,
            TCP_CHECKSUM_AT, TCP_MIN_HEADER_LEN, VNET_F_NEEDS_CSUM, VNET_GSO_TCPV4, VNET_GSO_TCPV6};

const VNET_GSO_ECN: u8 = 0x80;
const ETH_TYPE_VLAN: u16 = 0x8100;
const ETH_TYPE_QINQ: u16 = 0x88A8;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Where the headers of a super-frame are and how it is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub ipv6: bool,
    pub l3: usize,
    pub l4: usize,
    /// Ethernet, IP and TCP headers: what every segment starts with.
    pub header_len: usize,
    /// Payload bytes per segment (the last may be shorter).
    pub mss: usize,
    pub segments: usize,
}

impl Layout {
    /// The length of segment `i`'s frame.
    #[cfg(test)]
    pub fn segment_len(&self, frame_len: usize, i: usize) -> usize {
        let payload = frame_len - self.header_len;
        self.header_len + self.mss.min(payload - i * self.mss)
    }
}

/// The layout of a TCP super-frame read behind `vnet`, or None if it is not one this can cut.
pub(crate) fn layout(vnet: &[u8; 10], f: &[u8]) -> Option<Layout> {
    let gso = vnet[1] & !VNET_GSO_ECN;
    let mss = u16::from_le_bytes([vnet[4], vnet[5]]) as usize;
    if mss == 0 || (gso != VNET_GSO_TCPV4 && gso != VNET_GSO_TCPV6) || f.len() < ETHERNET_HEADER_LEN {
        return None;
    }
    let mut l3 = ETHERNET_HEADER_LEN;
    let mut ether_type = u16::from_be_bytes([f[12], f[13]]);
    if ether_type == ETH_TYPE_VLAN || ether_type == ETH_TYPE_QINQ {
        // One 802.1Q tag (the overlay carries VLANs end to end).
        if f.len() < l3 + 4 {
            return None;
        }
        ether_type = u16::from_be_bytes([f[16], f[17]]);
        l3 += 4;
    }
    let l4 = match ether_type {
        ETH_TYPE_IPV4 if gso == VNET_GSO_TCPV4 => {
            if f.len() < l3 + IPV4_MIN_HEADER_LEN || f[l3] >> 4 != 4 {
                return None;
            }
            let ihl = (f[l3] & 0x0f) as usize * 4;
            let fragment = u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x3fff;
            if ihl < IPV4_MIN_HEADER_LEN || fragment != 0 || f[l3 + 9] != PROTO_TCP {
                return None;
            }
            l3 + ihl
        }
        ETH_TYPE_IPV6 if gso == VNET_GSO_TCPV6 => {
            // No extension headers: the kernel's TCP puts none on its own segments.
            if f.len() < l3 + IPV6_HEADER_LEN || f[l3] >> 4 != 6 || f[l3 + 6] != PROTO_TCP {
                return None;
            }
            l3 + IPV6_HEADER_LEN
        }
        _ => return None,
    };
    if vnet[0] & VNET_F_NEEDS_CSUM != 0 {
        let start = u16::from_le_bytes([vnet[6], vnet[7]]) as usize;
        let offset = u16::from_le_bytes([vnet[8], vnet[9]]) as usize;
        if start != l4 || offset != TCP_CHECKSUM_AT {
            return None;
        }
    }
    if f.len() < l4 + TCP_MIN_HEADER_LEN {
        return None;
    }
    let header_len = l4 + (f[l4 + 12] >> 4) as usize * 4;
    if header_len < l4 + TCP_MIN_HEADER_LEN || header_len >= f.len() {
        return None;
    }
    let payload = f.len() - header_len;
    Some(Layout { ipv6: ether_type == ETH_TYPE_IPV6, l3, l4, header_len, mss, segments: payload.div_ceil(mss) })
}

/// Write segment `i` of super-frame `f` into `out` (at least `segment_len` bytes); returns its length.
pub(crate) fn write_segment(f: &[u8], lay: &Layout, i: usize, out: &mut [u8]) -> usize {
    let hl = lay.header_len;
    let payload_at = hl + i * lay.mss;
    let len = lay.mss.min(f.len() - payload_at);
    let n = hl + len;
    out[..hl].copy_from_slice(&f[..hl]);
    out[hl..n].copy_from_slice(&f[payload_at..payload_at + len]);
    let (l3, l4) = (lay.l3, lay.l4);
    let tcp_len = n - l4;
    // IP: this segment's length; IPv4 also the next id and a new header checksum.
    let pseudo = if lay.ipv6 {
        out[l3 + 4..l3 + 6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        ones_sum(&out[l3 + 8..l3 + 40])
    } else {
        out[l3 + 2..l3 + 4].copy_from_slice(&((n - l3) as u16).to_be_bytes());
        let id = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]).wrapping_add(i as u16);
        out[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
        out[l3 + 10..l3 + 12].fill(0);
        let csum = !(ones_sum(&out[l3..l4]) as u16);
        out[l3 + 10..l3 + 12].copy_from_slice(&csum.to_be_bytes());
        ones_sum(&out[l3 + 12..l3 + 20])
    } + PROTO_TCP as u64
        + tcp_len as u64;
    // TCP: sequence number, flags, checksum over the pseudo-header, header and payload.
    let seq = u32::from_be_bytes(f[l4 + 4..l4 + 8].try_into().unwrap()).wrapping_add((i * lay.mss) as u32);
    out[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
    if i + 1 < lay.segments {
        out[l4 + 13] &= !(TCP_FIN | TCP_PSH);
    }
    if i > 0 {
        out[l4 + 13] &= !TCP_CWR;
    }
    out[l4 + TCP_CHECKSUM_AT..l4 + TCP_CHECKSUM_AT + 2].fill(0);
    let csum = !(fold(pseudo + ones_sum(&out[l4..n])) as u16);
    out[l4 + TCP_CHECKSUM_AT..l4 + TCP_CHECKSUM_AT + 2].copy_from_slice(&csum.to_be_bytes());
    n
}

/// The 16-bit ones' complement sum of `data` (an odd tail padded with zero), folded, not inverted.
/// Summed a 32-bit native word at a time (vectorised), then byte-swapped on a little-endian host:
/// the ones' complement sum does not depend on byte order (RFC 1071, 2(B)).
pub(crate) fn ones_sum(data: &[u8]) -> u64 {
    let mut acc: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let mut sum = fold(acc) as u16;
    if cfg!(target_endian = "little") {
        sum = sum.swap_bytes();
    }
    let mut total = sum as u64;
    let tail = words.remainder();
    let mut pairs = tail.chunks_exact(2);
    for p in &mut pairs {
        total += u16::from_be_bytes([p[0], p[1]]) as u64;
    }
    if let [last] = pairs.remainder() {
        total += (*last as u64) << 8;
    }
    fold(total)
}

fn fold(mut sum: u64) -> u64 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071's definition, a 16-bit word at a time: the reference the fast sum is checked against.
    fn reference_sum(data: &[u8]) -> u32 {
        let mut sum: u32 = 0;
        for (k, b) in data.iter().enumerate() {
            sum += if k % 2 == 0 { (*b as u32) << 8 } else { *b as u32 };
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum
    }

    /// A segment's checksums hold: the IPv4 header sums to 0xffff, and so does the TCP segment with
    /// its pseudo-header, both by the reference sum.
    fn assert_checksums(seg: &[u8], lay: &Layout) {
        let (l3, l4) = (lay.l3, lay.l4);
        let tcp_len = seg.len() - l4;
        let mut pseudo = Vec::new();
        if lay.ipv6 {
            assert_eq!(u16::from_be_bytes([seg[l3 + 4], seg[l3 + 5]]) as usize, tcp_len);
            pseudo.extend_from_slice(&seg[l3 + 8..l3 + 40]);
            pseudo.extend_from_slice(&(tcp_len as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, PROTO_TCP]);
        } else {
            assert_eq!(u16::from_be_bytes([seg[l3 + 2], seg[l3 + 3]]) as usize, seg.len() - l3);
            assert_eq!(reference_sum(&seg[l3..l4]), 0xffff, "IPv4 header checksum");
            pseudo.extend_from_slice(&seg[l3 + 12..l3 + 20]);
            pseudo.extend_from_slice(&[0, PROTO_TCP]);
            pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        }
        pseudo.extend_from_slice(&seg[l4..]);
        assert_eq!(reference_sum(&pseudo), 0xffff, "TCP checksum");
    }

    /// A deterministic byte stream (no rand crate here).
    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn super_frame(ipv6: bool, vlan: bool, payload: usize, flags: u8) -> (Vec<u8>, [u8; 10]) {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
        }
        let l3 = f.len() + 2;
        if ipv6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, PROTO_TCP, 64]);
            f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        } else {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0xff, 0xfe, 0x40, 0, 64, PROTO_TCP, 0, 0]);
            f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        }
        let l4 = f.len();
        // Ports, sequence number near the wrap, ack, data offset 8 (12 bytes of options), flags.
        f.extend_from_slice(&[0x13, 0x88, 0xc0, 0x01, 0xff, 0xff, 0xf0, 0x00, 0, 0, 0, 1, 0x80, flags, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        f.extend_from_slice(&bytes(payload, payload as u32 + 7));
        // The kernel's lengths cover the whole super-frame (unused: the segments get their own).
        let ip_len = if ipv6 { f.len() - l3 - IPV6_HEADER_LEN } else { f.len() - l3 };
        f[l3 + if ipv6 { 4 } else { 2 }..][..2].copy_from_slice(&(ip_len as u16).to_be_bytes());
        let gso = if ipv6 { VNET_GSO_TCPV6 } else { VNET_GSO_TCPV4 };
        let mut vnet = [VNET_F_NEEDS_CSUM, gso, 0, 0, 0, 0, 0, 0, TCP_CHECKSUM_AT as u8, 0];
        vnet[4..6].copy_from_slice(&1000u16.to_le_bytes());
        vnet[6..8].copy_from_slice(&(l4 as u16).to_le_bytes());
        (f, vnet)
    }

    fn cut(f: &[u8], lay: &Layout) -> Vec<Vec<u8>> {
        (0..lay.segments)
            .map(|i| {
                let mut out = vec![0u8; lay.segment_len(f.len(), i)];
                assert_eq!(write_segment(f, lay, i, &mut out), out.len());
                out
            })
            .collect()
    }

    #[test]
    fn fast_sum_matches_the_reference_at_every_length_and_alignment() {
        let data = bytes(3000, 1);
        for start in 0..4 {
            for len in (0..200).chain([1399, 1400, 1401, 2995]) {
                let d = &data[start..start + len];
                assert_eq!(ones_sum(d) as u32, reference_sum(d), "start {start} len {len}");
            }
        }
    }

    #[test]
    fn ipv4_super_frame_cut_into_mss_segments_with_valid_checksums_and_last_segment_flags() {
        let (f, vnet) = super_frame(false, false, 4500, 0x18 | TCP_FIN | TCP_CWR); // ACK PSH FIN CWR
        let lay = layout(&vnet, &f).expect("a TCPv4 super-frame");
        assert_eq!((lay.segments, lay.mss, lay.header_len), (5, 1000, 14 + 20 + 32));
        let segs = cut(&f, &lay);
        let mut payload = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            assert_checksums(s, &lay);
            let flags = s[lay.l4 + 13];
            let last = i == segs.len() - 1;
            assert_eq!(flags & (TCP_FIN | TCP_PSH) != 0, last, "segment {i}");
            assert_eq!(flags & TCP_FIN != 0, last);
            assert_eq!(flags & TCP_CWR != 0, i == 0);
            assert_eq!(flags & 0x10, 0x10, "ACK on every segment");
            let seq = u32::from_be_bytes(s[lay.l4 + 4..lay.l4 + 8].try_into().unwrap());
            assert_eq!(seq, 0xfffff000u32.wrapping_add(1000 * i as u32), "sequence numbers wrap");
            assert_eq!(u16::from_be_bytes([s[18], s[19]]), 0xfffeu16.wrapping_add(i as u16), "IPv4 ids wrap");
            assert_eq!(s[..14], f[..14]);
            payload.extend_from_slice(&s[lay.header_len..]);
        }
        assert_eq!(segs[4].len(), lay.header_len + 500);
        assert_eq!(payload, f[lay.header_len..]);
    }

    #[test]
    fn ipv6_and_vlan_tagged_super_frames_are_cut_too() {
        for (ipv6, vlan) in [(true, false), (true, true), (false, true)] {
            let (f, vnet) = super_frame(ipv6, vlan, 2001, 0x18);
            let lay = layout(&vnet, &f).expect("a super-frame");
            assert_eq!((lay.ipv6, lay.segments), (ipv6, 3));
            assert_eq!(lay.l3, if vlan { 18 } else { 14 });
            let segs = cut(&f, &lay);
            for (i, s) in segs.iter().enumerate() {
                assert_checksums(s, &lay);
                assert_eq!(s[lay.l4 + 13] & TCP_PSH != 0, i == 2);
            }
            assert_eq!(segs[2].len(), lay.header_len + 1);
        }
    }

    #[test]
    fn what_cannot_be_cut_is_refused() {
        let (f, vnet) = super_frame(false, false, 3000, 0x10);
        let mut v = vnet;
        v[1] = VNET_GSO_TCPV6; // says IPv6, is IPv4
        assert!(layout(&v, &f).is_none());
        let mut v = vnet;
        v[4..6].fill(0); // no MSS
        assert!(layout(&v, &f).is_none());
        let mut v = vnet;
        v[6] += 2; // checksum start not the TCP header
        assert!(layout(&v, &f).is_none());
        let mut v = vnet;
        v[1] |= VNET_GSO_ECN; // ECN is fine
        assert!(layout(&v, &f).is_some());
        let mut g = f.clone();
        g[14 + 6] = 0x20; // a fragment
        assert!(layout(&vnet, &g).is_none());
        for n in 0..f.len().min(14 + 20 + 32 + 1) {
            assert!(layout(&vnet, &f[..n]).is_none(), "truncated to {n}");
        }
    }
}
