"""Path setup: finding a way through NATs to the peer and proving who is at its end.

What a tunnel does before the data path runs, in the order it happens:

    offer_answer     the offer/answer schema and the TunnelSignaling interface
    candidates       which of a peer's ICE candidates this node tries
    ice              aioice, direct and relay at once, the chosen path (IceAgent)
    inbound_gate     what an aioice connection receives, and from whom
    stun_guard       STUN from the network, checked before aioice parses it
    aioice_patches   every change evio makes to aioice, listed at its head
    aioice_mdns      aioice's mDNS module (and dnspython) loaded only if ever used
    turn_credentials TURN REST credentials
    deadlines        setup deadlines that stretch with the event loop's lag
    adopted_socket   the ICE-selected socket lent to the data path
    path_kind        direct or relayed
    dtls             DTLS handshake as a sans-I/O machine, certificate pinning
    trust            an overlay's trust anchor (CA-issued node certificates)
    overlay_ca       issuing an overlay's CA and node certificates, offline

Never imports evio.tunnel.datapath (an import-linter contract): the two meet
only in evio.tunnel.session, through the data path's ``Underlay`` interface.
"""
