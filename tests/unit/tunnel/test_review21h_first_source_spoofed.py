"""Review21h H10 (low): before nomination, one spoofed datagram from any of the peer's signalled candidates decides
where the controlled side's path goes.

Attack: `InboundGate.receive` lets a datagram that is not STUN through from any signalled remote candidate's
address while nothing is nominated (`allows`), and records the first one as `first_source`, whatever it holds (not
even DTLS: any first byte above 3). `IceAgent._path_of` then makes the controlled side *follow* that source: the
pair with that remote address in the check list, in any state (waiting, failed), replaces the nominated one and
`gate.selected` is set to it, so the peer's real DTLS from the address that did succeed is dropped as
foreign-source and the direct attempt fails (the tunnel falls back to the relay, or is set up again). Whoever sees
the checks go by (on path: addresses and ports are in the clear) can spoof such a datagram from one of the
peer's other candidates, e.g. its private host address, ahead of the peer's DTLS.

Measured (the gate alone, as tests/unit/tunnel/test_tunnel_ice.py drives it): a 13-byte datagram of junk
(first byte 0x80, no DTLS record) from the peer's second signalled candidate, before any nomination, passed the
gate and became `first_source`; `_path_of`'s follow rule is read from the code, not run. Severity low: it needs a
spoofed source and the tunnel's port, and costs only the direct path's setup.

Fixed: first_source only for a DTLS record from a source a check vouches for (the pair it follows then succeeded or was nominated). Proposed at the review: record `first_source` only for a DTLS record (first byte 20-63, RFC 7983) and only from a source an
authenticated check vouches for (`_checked`), and follow it only to a pair whose check succeeded.
"""

from __future__ import annotations

import aioice
from aioice import Connection

from evio.tunnel.path.inbound_gate import InboundGate
from tests.unit.tunnel.test_tunnel_ice import PEER_HOST, FakeProtocol, pair

PEER_OTHER = ("10.9.8.7", 40001)  # the peer's other signalled candidate (a private host address, say)
JUNK = b"\x80" + b"\x00" * 12  # not STUN, not DTLS


async def test_junk_from_a_signalled_candidate_before_nomination_does_not_choose_the_path() -> None:
    conn = Connection(ice_controlling=False)
    sock = FakeProtocol(1)
    conn._check_list[:] = [pair(sock, PEER_HOST, "host", aioice.ice.CandidatePair.State.IN_PROGRESS),
                           pair(sock, PEER_OTHER, "host", aioice.ice.CandidatePair.State.WAITING)]  # fmt: skip
    conn._remote_candidates = [p.remote_candidate for p in conn._check_list]
    gate = InboundGate(conn, "direct")
    passed: list[bytes] = []
    gate.receive(lambda data, addr: passed.append(data), JUNK, PEER_OTHER, sock)  # type: ignore[arg-type]
    assert gate.first_source is None, f"first_source {gate.first_source[1]} from {len(JUNK)} bytes of junk"
