"""`evio netcheck`: what a node's network lets it reach, asked of the servers in its config.

    config -> targets (plan.py) -> probes, concurrently, each under a deadline:
        STUN Binding from one UDP socket per family to every STUN and TURN server (stun.py)
        TURN Allocate over UDP, TCP and TLS (turn.py, aioice's client)
        XMPP: TCP, STARTTLS or direct TLS, the certificate checked for the domain (xmpp.py)
        path MTU: DF-set STUN probes of falling sizes to each server that answered (stun.py)
    -> Observations -> classify (findings.py, pure): NAT mapping, UDP, per-server verdicts, exit status
    -> text or JSON (findings.py)

It needs no daemon and touches none: its sockets are its own, on ephemeral ports.
"""
