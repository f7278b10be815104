"""The data path: Ethernet frames between a TAP and the underlay socket, sealed.

    interface      the Datapath and Underlay interfaces, stats and drop reasons
    fd_datapath    FdDatapath: the Python data path, its state and its path moves
    send           TAP -> underlay: read, seal, send (its numbered flow at its head)
    receive        underlay -> TAP: receive, open, deliver (its numbered flow at its head)
    native         NativeFdDatapath: the same passes in Rust (evio_native)
    mmsg           bursts with one system call (sendmmsg, recvmmsg, UDP GSO/GRO)
    offload        virtio-net headers, TCP segmentation and coalescing
    buffers        ring memory taken when written
    record         the record codec, RFC 7983 demultiplexing
    replay         the anti-replay window (RFC 6479)
    keys           DTLS exporter keys, epochs by HKDF ratchet, rekey policy
    tap            TAP devices
    mtu            the TAP MTU from the underlay's and every overhead
    transit_table  the transit fast path's table: frames tunnel to tunnel

Never imports evio.tunnel.path (an import-linter contract): the socket it
reads comes in through the ``Underlay`` interface.
"""
