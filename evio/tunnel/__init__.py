"""Tunnels: ICE through NATs, DTLS-authenticated keys, AEAD frame data path on a TAP.

Three rooms:

    path/        path setup: offer/answer, ICE (aioice and every patch to it),
                 candidates, STUN guard, TURN credentials, deadlines, DTLS, trust
    datapath/    the data path: send, receive, native, mmsg, offload, record,
                 replay, keys, TAP, MTU, the transit table
    lifecycle    the tunnel's lifecycle as a pure machine: events in, actions out

and, at this level, what joins them:

    session          Tunnel: performs the lifecycle's actions (ICE, DTLS, TAP,
                     data path, liveness, teardown)
    manager          TunnelManager: this node's tunnels, one per peer
    liveness         hello / keepalive / dead-peer state machine (pure)
    liveness_ticks   one grid of liveness ticks per event loop
    config           TunnelSettings from the overlay's config
    errors           the package's exceptions
    stun_framing     STUN framing checks both rooms use

path/ and datapath/ never import each other; the pure modules (lifecycle,
liveness, record, replay, keys, mtu, offload) do no I/O (import-linter
contracts in pyproject.toml). The one-tunnel harness (endpoint process, veth
testbed, `evio lab tunnel`) lives in evio.lab, above the daemon.
"""

from evio.tunnel.path.aioice_mdns import defer_mdns

defer_mdns()  # before any module of the package imports aioice: no dnspython (about 2 MB)
