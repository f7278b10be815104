//! benchmarks/rtt_floor.py's minimal forwarder: the least a userspace tunnel end can do per frame.
//!
//!     forwarder TAP LOCAL_ADDR:PORT REMOTE_ADDR:PORT [KEY_HEX]
//!
//! One TAP (no packet information, no vnet header) and one connected UDP socket, both non-blocking,
//! one thread blocking in `epoll_wait` (level-triggered) on both: one `read` or `recv` per ready fd per
//! wake-up and one `send` or `write`, so a ping costs the four wake-ups and the system calls any design
//! needs, and nothing else (no `EAGAIN` read, no batching, no event loop, no interpreter). With KEY_HEX
//! (32 bytes) every frame is sealed with AES-256-GCM by native/src/gcm.rs, the native data path's own,
//! as an 8-byte big-endian counter, the ciphertext and the 16-byte tag; a record whose tag fails is
//! dropped. No replay window, no rekeying, no path: a floor, not a tunnel.
//!
//! Built by rtt_floor.py with cargo (the crates native/Cargo.lock pins), never installed.

use std::io::Error;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

#[path = "../native/src/gcm.rs"]
#[allow(dead_code)]
mod gcm;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const COUNTER: usize = 8;
const TAG: usize = 16;
const FRAME: usize = 65_536;

fn open_tap(name: &str) -> libc::c_int {
    // struct ifreq: the name (16 bytes), then the flags (a short) at the start of the union.
    let mut ifr = [0u8; 40];
    assert!(name.len() < 16, "TAP name too long");
    ifr[..name.len()].copy_from_slice(name.as_bytes());
    ifr[16..18].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
    // SAFETY: a path literal, and an ifreq-sized buffer the ioctl reads and writes.
    unsafe {
        let fd = libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC);
        assert!(fd >= 0, "open /dev/net/tun: {}", Error::last_os_error());
        assert!(libc::ioctl(fd, TUNSETIFF, ifr.as_mut_ptr()) == 0, "TUNSETIFF {name}: {}", Error::last_os_error());
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert!(args.len() == 4 || args.len() == 5, "usage: forwarder TAP LOCAL:PORT REMOTE:PORT [KEY_HEX]");
    let tap = open_tap(&args[1]);
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
    let mut buf = vec![0u8; COUNTER + FRAME + TAG];
    let mut sent: u64 = 0;
    loop {
        let ready = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), 2, -1) };
        for event in events.iter().take(ready.max(0) as usize) {
            if event.u64 == 0 {
                // TAP -> UDP: the frame after room for the counter, sealed in place.
                let n = unsafe { libc::read(tap, buf[COUNTER..].as_mut_ptr().cast(), FRAME) };
                if n <= 0 {
                    continue;
                }
                let n = n as usize;
                let record = match &aead {
                    None => &buf[COUNTER..COUNTER + n],
                    Some(aead) => {
                        sent += 1;
                        buf[..COUNTER].copy_from_slice(&sent.to_be_bytes());
                        let nonce = nonce(&buf[..COUNTER]);
                        let tag = aead.seal(&nonce, &[], &mut buf[COUNTER..COUNTER + n]);
                        buf[COUNTER + n..COUNTER + n + TAG].copy_from_slice(&tag);
                        &buf[..COUNTER + n + TAG]
                    }
                };
                let _ = sock.send(record);
            } else {
                // UDP -> TAP: opened in place; a short record or a failed tag is dropped.
                let Ok(n) = sock.recv(&mut buf) else { continue };
                let frame = match &aead {
                    None => &buf[..n],
                    Some(aead) => {
                        if n < COUNTER + TAG {
                            continue;
                        }
                        let nonce = nonce(&buf[..COUNTER]);
                        let (body, tag) = buf[COUNTER..n].split_at_mut(n - COUNTER - TAG);
                        if !aead.open(&nonce, &[], body, tag) {
                            continue;
                        }
                        &buf[COUNTER..n - TAG]
                    }
                };
                let _ = unsafe { libc::write(tap, frame.as_ptr().cast(), frame.len()) };
            }
        }
    }
}
