//! benchmarks/rtt_floor.py's minimal forwarder: the least a userspace tunnel end can do per frame.
//!
//!     forwarder TAP LOCAL_ADDR:PORT REMOTE_ADDR:PORT [KEY_HEX [--like-evio]]
//!
//! One TAP (no packet information, no vnet header) and one connected UDP socket, both non-blocking,
//! one thread blocking in `epoll_wait` (level-triggered) on both: one `read` or `recv` per ready fd per
//! wake-up and one `send` or `write`, so a ping costs the four wake-ups and the system calls any design
//! needs, and nothing else (no `EAGAIN` read, no batching, no event loop, no interpreter). With KEY_HEX
//! (32 bytes) every frame is sealed with AES-256-GCM by native/src/gcm.rs, the native data path's own,
//! as an 8-byte big-endian counter, the ciphertext and the 16-byte tag; a record whose tag fails is
//! dropped. No replay window, no rekeying, no path: a floor, not a tunnel.
//!
//! With --like-evio the system calls are those of the native data path's bound passes (docs/performance.md,
//! "The receive side of a tunnel's added RTT (issue 25, deliverable 5)": per ping per end, two TAP reads, one
//! `recvmmsg`, one `writev`, one `sendmmsg`): the TAP with a vnet header and evio's offloads, read until
//! `EAGAIN` and the records sent with one `sendmmsg`; a burst of up to 64 records taken with one `recvmmsg`
//! and each frame written behind its vnet header with `writev`. The same work as evio's passes in the
//! kernel, with no interpreter around them: what a Rust thread per tunnel running them would pay.
//!
//! Built by rtt_floor.py with cargo (the crates native/Cargo.lock pins), never installed.

use std::io::Error;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

#[path = "../native/src/gcm.rs"]
#[allow(dead_code)]
mod gcm;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TAP_OFFLOADS: libc::c_ulong = 0x01 | 0x02 | 0x04; // TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6, as evio's TAP
const VNET: usize = 10; // struct virtio_net_hdr
const BATCH: usize = 64; // the data path's default burst
const SLOT: usize = 2048; // its least receive slot
const COUNTER: usize = 8;
const TAG: usize = 16;
const FRAME: usize = 65_536;

fn open_tap(name: &str, vnet: bool) -> libc::c_int {
    // struct ifreq: the name (16 bytes), then the flags (a short) at the start of the union.
    let mut ifr = [0u8; 40];
    assert!(name.len() < 16, "TAP name too long");
    ifr[..name.len()].copy_from_slice(name.as_bytes());
    let flags = IFF_TAP | IFF_NO_PI | if vnet { IFF_VNET_HDR } else { 0 };
    ifr[16..18].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: a path literal, and an ifreq-sized buffer (or an int) the ioctls read and write.
    unsafe {
        let fd = libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC);
        assert!(fd >= 0, "open /dev/net/tun: {}", Error::last_os_error());
        assert!(libc::ioctl(fd, TUNSETIFF, ifr.as_mut_ptr()) == 0, "TUNSETIFF {name}: {}", Error::last_os_error());
        if vnet {
            let size: libc::c_int = VNET as libc::c_int;
            assert!(libc::ioctl(fd, TUNSETVNETHDRSZ, &size) == 0, "TUNSETVNETHDRSZ: {}", Error::last_os_error());
            assert!(libc::ioctl(fd, TUNSETOFFLOAD, TAP_OFFLOADS) == 0, "TUNSETOFFLOAD: {}", Error::last_os_error());
        }
        fd
    }
}

fn key(hex: &str) -> [u8; 32] {
    assert!(hex.len() == 64, "the key is 64 hex digits");
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("the key is hex");
    }
    key
}

fn nonce(counter: &[u8]) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(counter);
    nonce
}

/// `frame` sealed into `out` (the counter, the ciphertext, the tag), or copied where there is no key.
fn seal(aead: Option<&gcm::FastGcm>, sent: &mut u64, frame: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let Some(aead) = aead else {
        out.extend_from_slice(frame);
        return;
    };
    *sent += 1;
    out.extend_from_slice(&sent.to_be_bytes());
    out.extend_from_slice(frame);
    let tag = aead.seal(&nonce(&out[..COUNTER]), &[], &mut out[COUNTER..]);
    out.extend_from_slice(&tag);
}

/// The frame inside `record`, opened in place; None for a short record or a failed tag.
fn open(aead: Option<&gcm::FastGcm>, record: &mut [u8]) -> Option<(usize, usize)> {
    let Some(aead) = aead else { return Some((0, record.len())) };
    let n = record.len();
    if n < COUNTER + TAG {
        return None;
    }
    let nonce = nonce(&record[..COUNTER]);
    let (body, tag) = record[COUNTER..].split_at_mut(n - COUNTER - TAG);
    aead.open(&nonce, &[], body, tag).then_some((COUNTER, n - TAG))
}

/// One read per readable TAP, one `send`; one `recv` per readable socket, one `write`.
fn minimal(tap: libc::c_int, sock: &UdpSocket, aead: Option<&gcm::FastGcm>, token: u64, sent: &mut u64, bufs: &mut [Vec<u8>; 2]) {
    let [frame, record] = bufs;
    if token == 0 {
        // SAFETY: `frame` has FRAME bytes of room.
        let n = unsafe { libc::read(tap, frame.as_mut_ptr().cast(), FRAME) };
        if n > 0 {
            seal(aead, sent, &frame[..n as usize], record);
            let _ = sock.send(record);
        }
    } else if let Ok(n) = sock.recv(frame) {
        if let Some((start, end)) = open(aead, &mut frame[..n]) {
            // SAFETY: start..end lies inside `frame`.
            let _ = unsafe { libc::write(tap, frame[start..].as_ptr().cast(), end - start) };
        }
    }
}

/// The native passes' system calls: the TAP read until `EAGAIN`, the records sent with one `sendmmsg`;
/// one `recvmmsg` of up to BATCH, each frame written behind a vnet header with `writev`. The iovec and
/// mmsghdr arrays are built per pass (a few hundred ns that evio's rings, built once, do not pay): if
/// anything, this row errs high.
fn like_evio(
    tap: libc::c_int, sock: &UdpSocket, aead: Option<&gcm::FastGcm>, token: u64, sent: &mut u64, frame: &mut [u8],
    slots: &mut [Vec<Vec<u8>>; 2],
) {
    let fd = sock.as_raw_fd();
    // SAFETY (both arms): every iovec points into a slot of SLOT or FRAME bytes that outlives the call.
    let [tx, rx] = slots;
    if token == 0 {
        let slots = tx;
        let mut records = 0;
        while records < BATCH {
            let n = unsafe { libc::read(tap, frame.as_mut_ptr().cast(), VNET + FRAME) };
            if n <= VNET as isize {
                break; // EAGAIN (or a frame without one)
            }
            seal(aead, sent, &frame[VNET..n as usize], &mut slots[records]);
            records += 1;
        }
        if records > 0 {
            let mut iov: Vec<libc::iovec> =
                slots[..records].iter_mut().map(|s| libc::iovec { iov_base: s.as_mut_ptr().cast(), iov_len: s.len() }).collect();
            let mut msgs: Vec<libc::mmsghdr> = iov.iter_mut().map(|v| {
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            }).collect();
            let _ = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), records as libc::c_uint, 0) };
        }
    } else {
        let slots = rx;
        let mut iov: Vec<libc::iovec> =
            slots.iter_mut().map(|s| libc::iovec { iov_base: s.as_mut_ptr().cast(), iov_len: SLOT }).collect();
        let mut msgs: Vec<libc::mmsghdr> = iov.iter_mut().map(|v| {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m
        }).collect();
        let got = unsafe { libc::recvmmsg(fd, msgs.as_mut_ptr(), BATCH as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        let lens: Vec<usize> = msgs.iter().take(got.max(0) as usize).map(|m| m.msg_len as usize).collect();
        let header = [0u8; VNET];
        for (slot, len) in slots.iter_mut().zip(lens) {
            if let Some((start, end)) = open(aead, &mut slot[..len]) {
                let parts = [
                    libc::iovec { iov_base: header.as_ptr() as *mut _, iov_len: VNET },
                    libc::iovec { iov_base: slot[start..].as_mut_ptr().cast(), iov_len: end - start },
                ];
                let _ = unsafe { libc::writev(tap, parts.as_ptr(), 2) };
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let evio = args.last().is_some_and(|a| a == "--like-evio");
    let args = &args[..args.len() - usize::from(evio)];
    assert!(args.len() == 4 || args.len() == 5, "usage: forwarder TAP LOCAL:PORT REMOTE:PORT [KEY_HEX [--like-evio]]");
    let tap = open_tap(&args[1], evio);
    let sock = UdpSocket::bind(&args[2]).expect("bind");
    sock.connect(&args[3]).expect("connect");
    sock.set_nonblocking(true).expect("non-blocking");
    let aead = args.get(4).map(|hex| gcm::FastGcm::new(&key(hex)).expect("AES-NI and PCLMULQDQ"));

    // SAFETY: plain epoll calls on fds this process owns; `events` outlives every epoll_wait.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(epoll >= 0, "epoll_create1: {}", Error::last_os_error());
    for (token, fd) in [(0u64, tap), (1u64, sock.as_raw_fd())] {
        let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        assert!(unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) } == 0);
    }
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 2];
    let mut bufs = [vec![0u8; COUNTER + FRAME + TAG], Vec::with_capacity(COUNTER + FRAME + TAG)];
    // The send ring's records (sealed into, their length the record's) and the receive ring's SLOT-byte slots.
    let mut slots = [(0..BATCH).map(|_| Vec::with_capacity(COUNTER + FRAME + TAG)).collect(), vec![vec![0u8; SLOT]; BATCH]];
    let mut sent: u64 = 0;
    loop {
        let ready = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), 2, -1) };
        for event in events.iter().take(ready.max(0) as usize) {
            if evio {
                like_evio(tap, &sock, aead.as_ref(), event.u64, &mut sent, &mut bufs[0], &mut slots);
            } else {
                minimal(tap, &sock, aead.as_ref(), event.u64, &mut sent, &mut bufs);
            }
        }
    }
}
