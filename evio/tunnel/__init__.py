"""Tunnels: ICE through NATs, DTLS-authenticated keys, AEAD frame data path on a TAP.

Pure pieces (no I/O, no clock):
    record      frame record codec, RFC 7983 first-byte demultiplexing
    replay      sliding anti-replay window (RFC 6479)
    keys        DTLS exporter keys per direction, epochs by HKDF ratchet, rekey policy
    liveness    hello / keepalive / dead-peer state machine
    mtu         TAP MTU from the underlay MTU and every overhead
    signaling   offer/answer schema and the TunnelSignaling interface
    dtls        DTLS handshake as a sans-I/O machine (pyOpenSSL), certificate pinning
    turn_credentials  TURN REST credentials

Adapters:
    datapath    the Datapath interface and its stats; fd_datapath: FdDatapath (uvloop, add_reader)
    underlay    borrowing the ICE-selected socket from aioice
    ice         aioice, direct paths first, relay fallback
    aioice_imports  aioice's mDNS module (and dnspython) loaded only if ever used
    tap         TAP devices (TUNSETIFF, pyroute2)
    session     one tunnel: setup, supervision, teardown
    manager     TunnelManager: this node's tunnels, one per peer

The one-tunnel harness (endpoint process, veth testbed, `evio lab tunnel`)
lives in evio.lab, above the daemon.
"""

from evio.tunnel.aioice_imports import defer_mdns

defer_mdns()  # before any module of the package imports aioice: no dnspython (about 2 MB)
