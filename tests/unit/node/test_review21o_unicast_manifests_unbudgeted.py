"""Review21o O3: signed manifests sent to one node's MAC are each checked (an ECDSA verification), with no budget
per sender or for unicast frames: a member stalls a chosen node's event loop with them.

Attack: member A sends frames of ethertype 0x88B5 to node u's bridge MAC (flows ahead by destination carry them
past any controller, decision 0072: no packet-in, no flood budget), each a MANIFEST of the revocation (or member)
list: A's own certificate (found the CA's once, then cached), any serial, a header naming one chunk, and a
signature that does not verify (or a valid one over a fresh serial each time; A signs at its leisure). `receive`
hands every MANIFEST to `_manifest`, which looks for an assembly of the same hashes (none: they change) and then
runs `revocation_manifest.check`: `Certificates.checked_key` (cached) and `public.verify` (ECDSA P-256) per frame.
The host claims flood budgets the same check for unicast frames (`HostClaimsFlood._verify_budget` with the port
`UNICAST`, review21f F9); the document floods have no such budget.

Code path: `read_frames` (64 a wake-up) -> `SignedDocumentFlood.receive` -> `_manifest` ->
`revocation_manifest.check` -> `ec.EllipticCurvePublicKey.verify`.

Measured (this machine, load 2.9, in-process, test_revocation_flood.py's fleet): 327 us of u's loop a manifest
with a bad signature, 351 us with a good one over a new serial (each also pays O2's serialization, 61 us with a
one-entry list): about 3,000 frames a second (about 14 Mbit/s of 600-byte frames) fill u's event loop, which also
runs its tunnels' timers, ICE consent, DTLS and signaling. Broadcast, the same frames reach an adjacent node at
its port's packet-in rate (1000/s: about a third of its loop) and the others at `FLOOD_RATE` (100/s).

Impact: medium (the yardstick of M4: a chosen node's availability, at a sustained rate the attacker pays for;
here a member, not a stranger, and about 35 times fewer frames a second than M4's STUN).

Suggested fix: a budget of signature checks per sender (the signer's node id once its certificate is cached, else
the frame's source MAC) and one for all unicast frames, as `HostClaimsFlood._verify_budget` does; a manifest past
it dropped and counted before `check`.

Fixed (decision 0043, amended for review21o): a manifest is checked only within a budget per way in (broadcast,
unicast: `document_flood.CHECK_RATE`), shared fairly among the signers (`SIGNER_CHECK_RATE`: the member the switch
delivered a broadcast for; for a unicast, the node id named if its certificate was found here, else one key for all
the others; since review21r a unicast too by the member holding its source MAC) by `evio.sdn.flood_shares`, as the
host claims' checks are; past it the manifest is dropped unchecked and counted (`dropped_verify_rate`, in the flood's
status). Measured (load 6.3-6.7): the 1,000 manifests of this test took 959 ms of u's loop before, 104 ms after (12
checks); another member's genuine list sent meanwhile is adopted.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from evio.node import document_flood as df
from evio.node import revocation_flood as rf
from evio.signal import identity, revocation_manifest
from tests.unit.node.test_revocation_flood import OV, certificate, fleet, frames_of, node_id, signed

FRAMES = 1000  # in one second of the virtual clock: about 0.6 MB, a third of one second at 14 Mbit/s
CHECKS_ALLOWED = 100  # far above what honest senders need in a second (a few manifests per list change)


def test_a_members_unicast_manifests_are_checked_within_a_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = [0]
    real_check = revocation_manifest.check

    def counted(*args: object) -> None:
        checks[0] += 1
        real_check(*args)  # type: ignore[arg-type]

    async def run() -> None:
        _, nodes, clock = fleet(3)
        u, attacker = nodes[0], 2
        rl = signed(3)
        assert u.signaling.receive_revocation_list(identity.list_to_text(rl), "/etc/evio/trust/revoked.json")
        cert = certificate(attacker)
        frames = []
        for i in range(FRAMES):
            header = rf.HEADER.pack(rf.MAGIC, df.VERSION, df.MANIFEST, 4 + i, 0, 1)
            manifest = revocation_manifest.pack(cert.key, cert.cert, OV, header, node_id(attacker), [os.urandom(64)])
            frames.append(manifest[:-4] + bytes(4))  # its signature spoiled: verified, then refused
        monkeypatch.setattr(revocation_manifest, "check", counted)
        for i, frame in enumerate(frames):
            u.receive(frame, bytes([2, 0, 0, 0, 0, attacker]), False)  # to u's MAC alone
            if i == FRAMES // 2:  # meanwhile member 1 sends u a newer list, as a firm answer (rule 5): it is checked
                for genuine in frames_of(signed(4), index=1):
                    u.receive(genuine, nodes[1].mac, False)
            await clock.advance(1.0 / FRAMES)
        counts = u.status()["counts"]
        print(f"{checks[0]} signature checks for {FRAMES} unicast manifests in 1 s; "
              f"dropped_unsigned {counts['dropped_unsigned']}, dropped_verify_rate {counts['dropped_verify_rate']}")
        assert checks[0] <= CHECKS_ALLOWED
        assert counts["dropped_unsigned"] + counts["dropped_verify_rate"] == FRAMES, "each counted, checked or not"
        assert counts["adopted"] == 1 and u.signaling.list is not None and u.signaling.list.serial == 4

    asyncio.run(run())
