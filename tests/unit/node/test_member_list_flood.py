"""The overlay CA's member list spread over the overlay (evio/node/member_list_flood.py, decision 0063).

As tests/unit/node/test_revocation_flood.py, on an in-memory broadcast medium standing in for Bounded Flood,
but with real signal endpoints (`FakeSignalClient`, not started: no server is needed to adopt a list), so
what the flood hands in is judged as a node judges it: the CA's signature, a newer serial, the list's shape;
and an adopted list is written beside the CA, where a restart reads it.
"""

from __future__ import annotations

import datetime
import random
import time
from pathlib import Path

from evio.node import document_flood as df
from evio.node import member_list_flood as mf
from evio.node import revocation_flood as rf
from evio.node.member_list_flood import MemberListFlood
from evio.signal import identity, member_list, revocation_manifest
from evio.signal.endpoint import OverlayIdentity
from evio.signal.events import MemberListAdopted
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OV = "ov1"
D = "x.test"
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA_CERT = make_overlay_ca("ov1 CA", NOW, 3650)
ANCHOR = TrustAnchor(OV, (CA_CERT,))
IDS = {f"m{i}@{D}": random.Random(i).getrandbits(128) for i in range(8)}
_CERTS: dict[int, TunnelCertificate] = {}


def certificate(index: int) -> TunnelCertificate:
    """Member `index`'s certificate of the overlay CA (made once: P-256 keys take a while)."""
    if index not in _CERTS:
        _CERTS[index] = TunnelCertificate(*issue_node_certificate(CA_KEY, CA_CERT, [OV], list(IDS.values())[index],
                                                                   NOW, 30))  # fmt: skip
    return _CERTS[index]


def listed(serial: int, count: int = 4, key: identity.CaKey = CA_KEY) -> member_list.MemberList:
    members = {node: account for account, node in list(IDS.items())[:count]}
    return member_list.sign_members(key, OV, serial, int(time.time()), members)


class Medium:
    """Every frame sent reaches every other connected node: what Bounded Flood does for a broadcast; a frame to
    one MAC reaches that node alone (a firm answer, as a learned unicast does)."""

    def __init__(self) -> None:
        self.nodes: list[WiredFlood] = []
        self.frames: list[tuple[int, bytes]] = []
        self.destinations: list[bytes] = []  # of each frame in `frames`

    def send(self, sender: WiredFlood, frame: bytes, to: bytes = df.BROADCAST) -> None:
        self.frames.append((sender.mac[-1], frame))
        self.destinations.append(to)
        for node in self.nodes:
            if node is not sender and node.connected and to in (df.BROADCAST, node.mac):
                node.receive(frame, sender.mac, to == df.BROADCAST)


class WiredFlood(MemberListFlood):
    def __init__(self, medium: Medium, index: int, clock: VirtualClock, hub: FakeSignalHub, tmp: Path,
                 held: member_list.MemberList) -> None:  # fmt: skip
        account, node_id = list(IDS.items())[index]
        cert = certificate(index)
        self.file = tmp / f"node{index}" / "member-list.json"
        self.file.parent.mkdir()
        self.file.write_text(member_list.to_text(held))
        ident = OverlayIdentity(ANCHOR, cert.cert, cert.key, members=held, member_file=self.file)
        self.client: FakeSignalClient = hub.client(account, {OV: node_id}, identities={OV: ident})
        super().__init__(OV, f"evbr{index}", self.client, clock, node_id=node_id, certificate=cert, anchor=ANCHOR)
        self.medium, self.mac, self.connected = medium, bytes([2, 0, 0, 0, 0, index]), True
        medium.nodes.append(self)
        self.client.subscribe(MemberListAdopted, self._adopted)

    def _send(self, frame: bytes, to: bytes = df.BROADCAST) -> bool:
        self.medium.send(self, frame, to)
        return True


def fleet(tmp: Path, n: int, held: member_list.MemberList) -> tuple[Medium, list[WiredFlood], VirtualClock]:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    medium = Medium()
    return medium, [WiredFlood(medium, i, clock, hub, tmp, held) for i in range(n)], clock


def serials(nodes: list[WiredFlood]) -> list[int]:
    return [ml.serial if (ml := n.client.listed_members(OV)) is not None else 0 for n in nodes]


def frames_of(ml: member_list.MemberList | bytes, serial: int | None = None, index: int = 0) -> list[bytes]:
    """The frames member `index` broadcasts `ml` (or text of `serial`) in: its signed manifest, the parts of the
    chunk hashes if there are more than a manifest lists, then the chunks."""
    text = ml if isinstance(ml, bytes) else member_list.to_text(ml).encode()
    serial = serial if serial is not None or isinstance(ml, bytes) else ml.serial
    assert serial is not None
    chunks = [text[i : i + df.CHUNK] for i in range(0, len(text), df.CHUNK)]
    cert, head = certificate(index), mf.HEADER.pack
    manifest = revocation_manifest.pack(cert.key, cert.cert, OV, head(mf.MAGIC, df.VERSION, df.MANIFEST, serial, 0,
                                        len(chunks)), list(IDS.values())[index], chunks)  # fmt: skip
    parts = [head(mf.MAGIC, df.VERSION, df.PARTS, serial, i, len(chunks)) + p
             for i, p in enumerate(revocation_manifest.parts(chunks))]  # fmt: skip
    return [manifest, *parts] + [head(mf.MAGIC, df.VERSION, df.LIST, serial, i, len(chunks)) + c
                                 for i, c in enumerate(chunks)]  # fmt: skip


def test_a_newer_list_from_the_server_host_reaches_every_node_over_the_overlay_and_is_kept_beside_the_ca(
    tmp_path: Path,
) -> None:
    medium, nodes, _ = fleet(tmp_path, 4, listed(1))
    newer = listed(2, count=8)  # four members added on the server host
    assert nodes[0].client.receive_member_list(member_list.to_text(newer), D)
    assert serials(nodes) == [2, 2, 2, 2]
    assert [n.client.listed_members(OV) for n in nodes] == [newer] * 4
    assert all(n.counts["adopted"] == 1 for n in nodes[1:])
    # Beside the CA, whole: what a restart reads (evio.node.plan.overlay_identity).
    assert [member_list.load(n.file.read_text()) for n in nodes] == [newer] * 4
    assert not list(tmp_path.glob("node*/.member-list.json.tmp"))
    assert [s for s, _ in medium.frames] == [0] * len(frames_of(newer)), "a list adopted from the overlay went again"


def test_a_node_whose_link_comes_up_asks_and_a_holder_answers(tmp_path: Path) -> None:
    import asyncio

    async def run() -> None:
        medium, nodes, clock = fleet(tmp_path, 3, listed(1))
        nodes[2].connected = False  # away while the list went round
        nodes[0].client.receive_member_list(member_list.to_text(listed(2, count=6)), D)
        assert serials(nodes) == [2, 2, 1]
        nodes[2].connected = True
        nodes[2].link_up()  # its HAVE of serial 1: the holders answer one list between them
        await clock.advance(df.ANSWER_JITTER + 0.1)
        assert serials(nodes) == [2, 2, 2]
        assert member_list.load(nodes[2].file.read_text()).serial == 2

    asyncio.run(run())


async def test_a_lost_answer_is_made_up_by_the_chosen_few_by_unicast_the_level_in_the_two_byte_index(
    tmp_path: Path,
) -> None:
    """The revocation flood's rule 5, the member list's frames: the one answer to L's HAVE is lost; L says it
    again FOLLOW_UP later and the FIRM_FEW holders it chooses send the list to L's MAC. An ask of level 1,
    carried in the HAVE's two-byte index, is answered by more."""
    n = 8
    medium, nodes, clock = fleet(tmp_path, n, listed(1))
    late = nodes[-1]
    late.connected = False  # it misses every copy and HAVE
    for i, node in enumerate(nodes[:-1]):
        node._rng.seed(4200 + i)
        node.arm_periodic_have()
    nodes[0].client.receive_member_list(member_list.to_text(listed(2, count=6)), D)
    await clock.advance(1.5 * df.HAVE_PERIOD_MAX)  # every holder heard the others' HAVEs: the ring is known
    for node in nodes:
        if node._periodic_timer is not None:
            node._periodic_timer.cancel()
    await clock.advance(df.FOLLOW_UP + df.ANSWER_JITTER)
    late.connected = True
    before = len(medium.frames)
    late.link_up()
    late.connected = False  # the answer is lost
    await clock.advance(df.ANSWER_JITTER + 0.01)
    late.connected = True
    assert serials(nodes)[-1] == 1
    await clock.advance(df.FOLLOW_UP + df.ANSWER_JITTER)
    firsts = [(to, mf.HEADER.unpack_from(f)) for (_, f), to in zip(medium.frames[before:], medium.destinations[before:],
              strict=True) if f[:4] == mf.MAGIC]  # fmt: skip
    haves = [h for to, h in firsts if h[2] == df.HAVE]
    unicasts = [to for to, h in firsts if h[2] == df.LIST and h[4] == 0 and to != df.BROADCAST]
    assert serials(nodes) == [2] * n and late.counts["sent_follow_up"] == 1
    assert [h[4] for h in haves] == [0, 0] and unicasts == [late.mac] * df.FIRM_FEW
    assert sum(node.counts["sent_firm"] for node in nodes) == df.FIRM_FEW
    # An asker that climbed to level 1 (a level is earned one ask at a time, review21h H8) asking twice:
    # FIRM_FEW * FIRM_WIDEN (here every one of the 8 holders, L now one) answer it.
    asker = b"\x02\xee" + bytes(4)
    answered = []
    for level in (0, 1):
        before_firm = sum(node.counts["sent_firm"] for node in nodes)
        for _ in range(2):
            for node in nodes:
                node.receive(mf.HEADER.pack(mf.MAGIC, df.VERSION, df.HAVE, 1, level, 0), asker)
        await clock.advance(df.ANSWER_JITTER + 0.01)
        answered.append(sum(node.counts["sent_firm"] for node in nodes) - before_firm)
        await clock.advance(df.FIRM_INTERVAL)  # its back-off; the few that answered it may answer it again
    # L heard other HAVEs than the rest, so its ring may count itself among the few
    assert df.FIRM_FEW <= answered[0] <= df.FIRM_FEW + 1 and answered[1] == n, answered


def test_a_list_not_signed_by_the_overlay_ca_is_dropped_counted_and_not_written(tmp_path: Path) -> None:
    _, nodes, _ = fleet(tmp_path, 2, listed(1))
    other_key, _ = make_overlay_ca("not the overlay CA", NOW, 3650)
    before = nodes[1].file.read_text()
    for frame in frames_of(listed(7, count=8, key=other_key)):
        nodes[1].receive(frame, b"\x02" * 6)
    assert nodes[1].counts["not_adopted"] == 1 and nodes[1].counts["adopted"] == 0
    assert nodes[1].client.drop_counts().get("bad_revocation") == 1
    assert serials(nodes) == [1, 1] and nodes[1].file.read_text() == before


def test_an_older_or_equal_serial_is_not_taken(tmp_path: Path) -> None:
    _, nodes, _ = fleet(tmp_path, 1, listed(1))
    assert nodes[0].client.receive_member_list(member_list.to_text(listed(5)), D)
    assert not nodes[0].client.receive_member_list(member_list.to_text(listed(3, count=8)), D)
    for frame in frames_of(listed(4, count=8)):  # an older list over the overlay: not even assembled
        nodes[0].receive(frame, b"\x02" * 6)
    assert serials(nodes) == [5] and nodes[0].counts["adopted"] == 0 and not nodes[0]._pending
    assert member_list.load(nodes[0].file.read_text()).serial == 5


def test_malformed_and_oversize_frames_are_dropped_and_counted(tmp_path: Path) -> None:
    _, nodes, _ = fleet(tmp_path, 1, listed(1))
    node, peer = nodes[0], b"\x02" * 6
    head = mf.HEADER.pack
    node.receive(b"EVML\x01", peer)
    node.receive(head(mf.MAGIC, 9, df.LIST, 5, 0, 1) + b"{", peer)
    node.receive(head(mf.MAGIC, df.VERSION, df.LIST, 5, 3, 2) + b"{", peer)
    node.receive(head(mf.MAGIC, df.VERSION, df.LIST, 5, 0, 2) + b"x" * (df.CHUNK + 1), peer)
    node.receive(head(mf.MAGIC, df.VERSION, df.LIST, 5, 0, node.max_chunks + 1) + b"{", peer)
    for frame in frames_of(b"not a list", 5):  # whole, signed by a member, but no JSON
        node.receive(frame, peer)
    assert (node.counts["dropped_short"], node.counts["dropped_malformed"], node.counts["dropped_oversize"]) == (1, 3, 1)
    assert node.counts["not_adopted"] == 1 and node.client.drop_counts().get("bad_revocation") == 1
    assert node.max_chunks * df.CHUNK >= mf.MAX_BYTES > 70 * 1024  # 1,000 members fit with room to spare
    assert serials(nodes) == [1]


def test_a_list_too_large_to_flood_is_not_sent(tmp_path: Path) -> None:
    medium, nodes, _ = fleet(tmp_path, 2, listed(1))
    nodes[0].MAX_BYTES = 100
    nodes[0].client.receive_member_list(member_list.to_text(listed(2)), D)
    assert nodes[0].counts["not_sent_oversize"] == 1 and not medium.frames and serials(nodes) == [2, 1]


def test_the_two_floods_share_an_ethertype_and_skip_each_others_frames_uncounted(tmp_path: Path) -> None:
    _, nodes, _ = fleet(tmp_path, 1, listed(1))
    revocation_frame = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, 9, 0, 1) + b"{}"
    nodes[0].receive(revocation_frame, b"\x02" * 6)
    assert not nodes[0].counts
    assert mf.MAGIC != rf.MAGIC and isinstance(nodes[0], rf.SignedDocumentFlood)
    assert frames_of(listed(1))[0][:4] != revocation_frame[:4]


def test_a_change_from_the_server_host_is_not_flooded_and_a_seeds_whole_list_reaches_a_node_it_missed(
    tmp_path: Path,
) -> None:
    """Decision 0065: every member online gets the change and applies it, none floods it (n floods of the whole
    list over the overlay); the few that got the whole list flood it, for a node the server could not reach."""
    held = listed(1)
    medium, nodes, _ = fleet(tmp_path, 4, held)
    newer = listed(2, count=5)
    change = member_list.change_to_text(member_list.change_between(held, newer))
    for node in nodes[1:3]:  # node 3 is cut off from the server
        node.client._members_message(D, change)
    assert serials(nodes) == [1, 2, 2, 1] and medium.frames == []
    nodes[0].client._members_message(D, member_list.to_text(newer))  # a seed: the whole list
    assert serials(nodes) == [2, 2, 2, 2] and nodes[3].counts["adopted"] == 1
    assert [n.client.listed_members(OV) for n in nodes] == [newer] * 4
    assert {s for s, _ in medium.frames} == {0}
