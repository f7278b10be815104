"""review21v3 finding 1: a linked member steps its sending epoch on every record, and each record makes its peer derive
the next epoch's keys on the event loop, past decision 0079's budget (which counts control records only).

Attack: member A, linked to node u, holds its own direction's traffic secret (it is the other end), so it can ratchet
it forward (`TrafficSecret.next`) as often as it likes: it seals record i in epoch i+1 (the epoch byte wraps; the
receiver compares it modulo 256). Each such record is of u's next epoch, so both data paths leave it to Python's
`_open_slow`, which opens it with the `_rx_next` derived at the last promotion, then `_promote_rx`: the record's epoch
becomes the current one and the one after is derived at once (`TrafficSecret.next` and `keys`, three HKDF-Expand
calls, a new AEAD object and replay window, and on the native path the native key). Nothing bounds how often: an
honest sender moves on once per `RekeyPolicy` (an hour, or 2^23 records of AES-GCM: seconds at the very least).
The records may be frame records (delivered like any frame) or control records (derived before the budget of 0079,
which is spent after decryption).

Measured (this machine, load 0.5-1.0, `evio.testing.datapath_pair`, 4,000 records delivered 100 at a time with a wait
for each batch, so the harness's own cost is in every figure): frame records of the current epoch 34 us a record in
the Python data path and 37 us in the native one; the same records each in a new epoch 96 us and 112 us, some 60-75 us
more a record; the derivation alone (next + keys + AEAD) is 32 us (timeit, 20,000 steps). Against the accepted
residual (a stranger's forged 0x71 record, a Python decryption) in the same harness at load 1.2-1.6: forged 50-55 us,
stepping 188 us (Python) and 243-282 us (native), 3.5-5 times as much a datagram. So about 13,000 such records
a second (68-byte datagrams, some 7 Mbit/s) fill u's event loop, which also runs every other tunnel's timers, ICE
consent, DTLS, signaling and the controller's commands: as review21o O4's control records did, at a similar rate.

Impact: medium (the yardstick review21o O4 and issue 21's M4 used: a chosen node's availability at a sustained rate,
from any linked member; decision 0079 closed it for control records only).

Suggested fix: bound epoch promotions per tunnel (a token bucket of a few at once and one every few seconds is far
above `RekeyPolicy`'s pace); a record of the next epoch past it dropped and counted (a `DropReason` of its own)
before `_promote_rx` derives anything, and the one after `_rx_next` derived lazily, so one record costs at most one
derivation within the bound. The bound is a setting of the data path: tests that rekey every few records
(`test_tunnel_datapath.py`'s `RekeyPolicy(max_records=4)`, the differential test's 260 epochs) step far faster
than any node, and would set it high.

Fixed (decision 0079, amendment 1): `RekeyPolicy.peer_epochs` (by default 4 at once, then 1 a second) bounds the
moves to a next epoch; while it is spent a record of the next epoch is dropped unopened, counted `epoch-rate`, and a
token is spent only by a record that authenticated. Measured in the harness above (load 5.0-5.4): 4 of 4,000 stepping
records opened, 54 us a datagram (Python) and 40 (native) against 231 and 278 before, no more than forged records.
"""

from __future__ import annotations

import sys

import pytest

from evio.testing.datapath_pair import Pair, close, frame, make_pair
from evio.testing.waiting import wait_until
from evio.tunnel.datapath.keys import make_aead, split_exporter
from evio.tunnel.datapath.record import KIND_FRAME, seal

_implementation = "python"
RECORDS = 2000  # each in an epoch of its own: 0.15 s of a 13,000 a second sender
PROMOTIONS_ALLOWED = 100  # far above what any RekeyPolicy makes an honest sender do in the test's fraction of a second


@pytest.fixture(autouse=True)
def _each_implementation(implementation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "_implementation", implementation)


def _opened_or_counted(pair: Pair, got: list[bytes]) -> int:
    b = pair.b
    got.extend(b.tap.frames())
    return len(got) + sum(b.datapath.stats().drops.values())


def _rx_epoch(pair: Pair) -> int:
    """The epoch u (end b) receives in now."""
    rx = pair.b.datapath._rx
    assert rx is not None
    return rx.epoch


async def test_a_member_stepping_its_epoch_on_every_record_is_bounded() -> None:
    pair = await make_pair(_implementation)
    try:
        secret = split_exporter(pair.material, pair.cipher, True).tx  # A's sending secret: A is this end
        got: list[bytes] = []
        for first in range(0, RECORDS, 100):
            for i in range(first, first + 100):
                secret = secret.next()
                keys = secret.keys()
                pair.wire.deliver_to_b(seal(make_aead(pair.cipher, keys.key), keys.iv, KIND_FRAME, secret.epoch, 1, frame(i)))
            sent = first + 100
            await wait_until(lambda: _opened_or_counted(pair, got) >= sent, timeout=30)  # noqa: B023 - awaited at once
        promoted = _rx_epoch(pair)  # each record opened moved u to its epoch (and derived the next)
        print(f"{_implementation}: {len(got)} of {RECORDS} records opened, u now at epoch {promoted}")
        assert promoted <= PROMOTIONS_ALLOWED
        assert len(got) <= PROMOTIONS_ALLOWED
    finally:
        close(pair)


async def test_an_honest_rekey_is_followed() -> None:
    """A sender that moves on a few epochs (as `RekeyPolicy` does, each after many records) is followed: every frame
    of every epoch arrives, stragglers of the previous epoch too."""
    pair = await make_pair(_implementation)
    try:
        secrets = [split_exporter(pair.material, pair.cipher, True).tx]
        for _ in range(3):
            secrets.append(secrets[-1].next())
        records = []
        for n, secret in enumerate(secrets):
            keys = secret.keys()
            aead = make_aead(pair.cipher, keys.key)
            records += [seal(aead, keys.iv, KIND_FRAME, secret.epoch, c, frame(100 * n + c)) for c in range(1, 21)]
        straggler = secrets[-2].keys()
        records.append(seal(make_aead(pair.cipher, straggler.key), straggler.iv, KIND_FRAME, secrets[-2].epoch, 21, frame(999)))
        for record in records:
            pair.wire.deliver_to_b(record)
        got: list[bytes] = []
        await wait_until(lambda: _opened_or_counted(pair, got) >= len(records), timeout=10)
        assert len(got) == len(records)
        assert _rx_epoch(pair) == secrets[-1].epoch
    finally:
        close(pair)
