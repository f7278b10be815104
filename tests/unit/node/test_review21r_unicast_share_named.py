"""Review21r: a member spends another member's share of a node's unicast manifest checks by naming it, so the
honest member's unicast answers (a firm answer to an ask, rule 5) are dropped unchecked.

Attack: member A sends frames of ethertype 0x88B5 to node u's bridge MAC (flows ahead by destination, no controller
and no flood budget on the way, decision 0072), each a MANIFEST of the revocation list naming member V: V's node id
and V's certificate (public: V sends it in every manifest it floods), any newer serial, a spoiled signature, about
20 a second. `SignedDocumentFlood._manifest` budgets the check before making it (decision 0043 amended, review21o
O3), and `_check_key` gives a unicast the share of the node id it names once that certificate was found the CA's
here: every one of A's frames spends V's share (`SIGNER_CHECK_RATE`, 2 a second), and V's genuine manifest,
sent to u in answer, finds V's share empty and is dropped as `dropped_verify_rate` before its check. A names each
known member in turn (about 2 frames a second per member, 100 frames a second for 50 members) and every holder's
unicast answer to u is dropped.

Code path: `SignedDocumentFlood.receive` -> `_manifest` -> `_check_key` (the named `manifest.node_id`, found in
`self._certificates`) -> `FloodShares.allow(UNICAST_WAY, V's id)` -> `dropped_verify_rate`.

Impact: medium (a bounded denial against a chosen node at a low rate): u's catch-up by unicast (a firm answer goes
to one asker, at most once per `FIRM_INTERVAL`, 30 s, per holder) is cut off for as long as A keeps sending; u
then depends on a broadcast answer, which A cannot spend. Issue 21 asks a revocation to be honoured within 5 s.

Suggested fix: a share that an attacker cannot name into: key a unicast manifest by who delivered it, not by whom
it names (the source MAC's owner where the switch checks unicast sources, else the tunnel it came by), or check a
manifest naming a signer whose last unicast manifests failed their signature only after that signer's genuine ones
(a failed check for V's id does not spend V's share: a separate share for "named V, signature not yet seen good"),
so that only a signature that verified earns V's share.

Fixed (decision 0043, amended for review21o and review21r): a manifest's check is charged to whoever delivered it as
far as the frame tells, a unicast as a broadcast: the member whose host claims hold its source MAC (`_ring_key`), one
key for MACs nobody holds; never to the node id it names. A's frames spend A's share (or, from invented MACs, the
one key of the unknown), and V's answer from V's interface finds V's share whole. Residual: the switch does not check
a unicast's source MAC (0072), so A forging V's very MAC still spends V's share (0043's "Not done").
"""

from __future__ import annotations

import asyncio
import os

import pytest
from cryptography.hazmat.primitives import serialization

from evio.node import document_flood as df
from evio.node import revocation_flood as rf
from evio.signal import revocation_manifest
from tests.unit.node.test_revocation_flood import OV, certificate, fleet, frames_of, node_id, signed

RATE = 20  # A's frames a second, all naming V
SECONDS = 5  # issue 21's bound for a revocation


@pytest.mark.parametrize("claims", [True, False], ids=["host-claims", "no-host-claims"])
def test_a_member_naming_another_cannot_spend_its_unicast_check_share(claims: bool) -> None:
    async def run() -> None:
        _, nodes, clock = fleet(3)
        u, victim, attacker = nodes[0], 1, 2
        if claims:  # the daemon's case: senders known by the member whose host claims hold their MAC
            owners = {node.mac: node._node_id for node in nodes}
            for node in nodes:
                node.use_members(owners.get)
        for frame in frames_of(signed(3), index=victim):  # a list V broadcast: adopted, V's certificate found at u
            u.receive(frame, nodes[victim].mac, True)
        cert = certificate(victim)
        assert u.signaling.list is not None and u.signaling.list.serial == 3
        assert u._certificates.found(cert.cert.public_bytes(serialization.Encoding.DER), node_id(victim))
        genuine = frames_of(signed(4), index=victim)
        for second in range(SECONDS):
            for i in range(RATE):
                header = rf.HEADER.pack(rf.MAGIC, df.VERSION, df.MANIFEST, 100 + second * RATE + i, 0, 1)
                forged = revocation_manifest.pack(cert.key, cert.cert, OV, header, node_id(victim), [os.urandom(64)])
                u.receive(forged[:-4] + bytes(4), nodes[attacker].mac, False)  # V's id and cert, spoiled signature
                if i == RATE // 2:  # V answers u by unicast, once a second (far more often than FIRM_INTERVAL)
                    for frame in genuine:
                        u.receive(frame, nodes[victim].mac, False)
                await clock.advance(1.0 / RATE)
        counts = u.status()["counts"]
        print(f"after {SECONDS} s: adopted {counts.get('adopted', 0)}, dropped_verify_rate {counts.get('dropped_verify_rate', 0)}, "
              f"u's serial {u.signaling.list.serial if u.signaling.list else None}")
        assert counts["dropped_verify_rate"] > 0, "A's forgeries were all checked: the budget was not what held them"
        assert u.signaling.list is not None and u.signaling.list.serial == 4, "V's genuine answer was never checked"

    asyncio.run(run())
