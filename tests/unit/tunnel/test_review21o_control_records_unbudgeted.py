"""Review21o O4: a linked member's authenticated control records each reach Python and its handler, at whatever
rate it sends them: a member stalls its peer's event loop with 36-byte records.

Attack: member A, linked to node u (any tunnel: a ring neighbour, an on-demand link), seals control records with
its own tunnel keys (it holds them: it is the other end) and sends them as fast as it likes: ECHO_REQUEST (each
answered with an ECHO_REPLY), HELLO without `HELLO_PEER_SEEN` (each answered with a HELLO), PMTU_PROBE (each
answered), or OVERLAY_SIGNAL (each parsed by ring signaling before its per-neighbour `CHUNK_RATE` drops it). Frames
go by the native fast path and OVS, no Python; a control record always takes `_open_slow` (the native data path
leaves control records in the ring for Python too), `parse_control`, the session's `_on_control`, `Liveness.on_control`
and, for most opcodes, the sealing and sending of an answer. Nothing counts them against a budget: the replay window
admits every new counter.

Code path: `receive._open_slow` (or the native ring's slow records) -> `parse_control` -> `on_control` (the session's
`TunnelSession._on_control` -> `Liveness.on_control` -> `SendControl`).

Measured (this machine, load 2.1-2.7, `evio.testing.datapath_pair` over socketpairs, records delivered 100 at a
time with a wait for each batch: an upper bound, the waits included): 48.9 us a control record in the Python data
path, 56.6 us in the native one, to the pair's `control.append` alone (a real session also runs liveness and
answers): some 20,000 records a second (36 bytes each, about 13 Mbit/s with UDP and IP headers) fill the node's
event loop, which also runs every other tunnel's timers, ICE consent, DTLS, signaling and the controller's commands.

Impact: medium (M4's yardstick: a chosen node's availability at a sustained rate; here any linked member, with
fewer and smaller datagrams than M4's 107,000 STUN requests a second).

Suggested fix: a token bucket of control records per tunnel in the receive path (a few hundred a second covers
HELLO, keepalives, echo probes, PMTU probes and OVERLAY_SIGNAL's `CHUNK_RATE` of 20/s with room), records past
it dropped and counted (a `DropReason` of their own) before `parse_control` and the handler.

Fixed (decision 0079): `_open_slow` spends a token of the tunnel's `CONTROL_BUDGET` (200 a second, 200 at once)
for each authenticated control record before parsing it, CLOSE from an allowance of its own (`CLOSE_BUDGET`);
past them a record is counted `control-rate` and read no further. Both data paths take control records there.
"""

from __future__ import annotations

import sys

import pytest

from evio.testing.datapath_pair import close, make_pair
from evio.testing.waiting import wait_until
from evio.tunnel.datapath.fd_state import CONTROL_BUDGET
from evio.tunnel.datapath.interface import DropReason
from evio.tunnel.datapath.keys import make_aead, split_exporter
from evio.tunnel.datapath.record import KIND_CONTROL, ControlOpcode, pack_control, pack_probe, seal

_implementation = "python"
RECORDS = 8000  # back to back (about 0.5 s here): 0.4 s of a 20,000 a second sender
HANDLED_ALLOWED = 2000  # a budget of up to 1000 a second with a burst of 1000 stays below; honest peers send a few a second


@pytest.fixture(autouse=True)
def _each_implementation(implementation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "_implementation", implementation)


async def test_a_linked_members_control_records_are_handled_within_a_budget() -> None:
    pair = await make_pair(_implementation)
    try:
        keys = split_exporter(pair.material, pair.cipher, True).tx.keys()  # A's sending keys: A is this end
        aead = make_aead(pair.cipher, keys.key)
        b = pair.b

        def taken_or_counted() -> int:
            return len(b.control) + sum(b.datapath.stats().drops.values())

        for first in range(0, RECORDS, 100):
            for counter in range(first, first + 100):
                record = seal(aead, keys.iv, KIND_CONTROL, 0, 1000 + counter,
                              pack_control(ControlOpcode.ECHO_REQUEST, 0, counter))  # fmt: skip
                pair.wire.deliver_to_b(record)
            await wait_until(lambda sent=first + 100: taken_or_counted() >= sent, timeout=10)  # (100 fit any buffer)
        print(f"{_implementation}: {len(b.control)} of {RECORDS} control records handed to the handler")
        assert len(b.control) <= HANDLED_ALLOWED
        # Every record past the budget counted under its own reason, none lost unaccounted.
        assert b.datapath.stats().dropped(DropReason.CONTROL_RATE) == RECORDS - len(b.control)
        assert b.datapath.stats().rx_records == RECORDS  # authentic: the peer was heard (liveness), handled or not
        # The member spent the budget; its CLOSE is still heard (an allowance of its own).
        record = seal(aead, keys.iv, KIND_CONTROL, 0, 1000 + RECORDS, pack_control(ControlOpcode.CLOSE))
        pair.wire.deliver_to_b(record)
        await wait_until(lambda: bool(b.control) and b.control[-1].opcode is ControlOpcode.CLOSE, timeout=10)
    finally:
        close(pair)


async def test_an_honest_burst_of_control_records_is_all_handled() -> None:
    """The budget's burst at once, every opcode an honest peer sends (a PMTU round, ring signaling's burst of 40,
    echoes, HELLOs): all handled, nothing dropped."""
    pair = await make_pair(_implementation)
    try:
        keys = split_exporter(pair.material, pair.cipher, True).tx.keys()
        aead = make_aead(pair.cipher, keys.key)
        b = pair.b
        opcodes = [op for op in ControlOpcode if op not in (ControlOpcode.CLOSE, ControlOpcode.PMTU_PROBE)]
        for counter in range(CONTROL_BUDGET.burst):
            opcode = opcodes[counter % len(opcodes)]
            payload = pack_probe(counter, 100) if counter % 10 == 0 else pack_control(opcode, 0, counter, b"signal")
            pair.wire.deliver_to_b(seal(aead, keys.iv, KIND_CONTROL, 0, 1000 + counter, payload))
            if counter % 50 == 49:
                await wait_until(lambda sent=counter + 1: len(b.control) + sum(b.datapath.stats().drops.values()) >= sent,
                                 timeout=10)  # fmt: skip
        assert len(b.control) == CONTROL_BUDGET.burst
        assert b.datapath.stats().dropped(DropReason.CONTROL_RATE) == 0
    finally:
        close(pair)
