"""Review21w2 finding 1 (medium): a used join token's node key still speaks for the member along the ring, and the
answers come back to whoever holds it.

Decision 0083 made a join token good for one join (its XMPP password is changed by `evio join`) and wrote as its
residual that a *member* of the overlay who finds another member's used token "can sign link requests and offers
along the ring (0064) as the victim's node id". That undersells it. A ring request's answer is sealed to the key of
the certificate the request carried (`RingSignaling._serve` -> `_send(reply, request.sender_key, came_from)`) and
goes greedily towards the victim's node id or, with no link closer, back the way the request came. The finder sends
from its own tunnel to the target, so the target's only way back to the "victim" is often the finder itself, and the
finder, holding the token's key, opens the answer. So the finder both asks and reads: a link request accepted as
the victim, then an offer as the victim answered with the target's ICE credentials and fingerprint; the DTLS check
passes too (the certificate and key are the victim's, the CA's own). That is the H2 consequence (another member's
node id, its tunnels from the target) behind one precondition: a used token, found within its certificate's 30 days.
`evio join` installs the token's key and certificate unchanged (`evio/server/join.py`: `node.key`, `node.crt`), so
the victim's node keeps running on the very key the token gave away; nothing on the node or the server host ever
replaces it. And the remedy 0083 names, "`evio member renew` replaces a leaked key", does not: `renew_member`
issues a new key and certificate for the same node id and leaves the old one valid until it expires ("the old one
stays valid until it expires"); revocation lists name node ids, not certificates, and `TrustAnchor.refusal` takes
any unexpired certificate the CA issued for the id. Only `evio member remove` (the member's node id revoked, the
member gone) ends it. `evio/server/token.py` says the same ("`evio member renew` and `evio member remove` end
those", of the node key and the TURN password); `renew_member` touches neither the old certificate nor the TURN
password.

Where it reaches: a node with no live tunnel to the victim (most of an overlay: a member links to a few peers) takes
the finder's offer as the victim's and sets the tunnel up to the finder's candidates. A node with a live one is kept
from a replacing offer by review21h H7's fix (it waits for the old tunnel's echo), but not from a link request: one
signed with the token's key, of another epoch, is the victim's "restart" (`Orchestrator.link_request`, finding 3 of
this round) and ends the victim's live link there at once (fourth test: node3's real state machine, its link to
node1 `up` before, `awaiting` after one request from node2; the answer went to node1, which dropped it as
unexpected, and the finder needs none). So the finder can also take the victim's links down at each of its peers,
one message each, for the certificate's life. Once up, the finder also holds the key the victim's signed host claims
(0055) are made with, so it can send them on that tunnel and draw the victim's MACs towards itself at the target
(not reproduced here: this file stops at the offer served and its answer read).

Attack reproduced (below, in-process): node1 (victim), node2 (finder, a member with a tunnel to node3) and node3
(target) added by `evio member add` on a fake server host; node1 joined with `evio join` and runs on what it wrote.
Two days later (the token expired) node2 runs a `RingSignaling` as node1's node id with the token's certificate and
key over its own tunnel to node3 and sends a `tunnel.offer`. Measured: node3 served it as from node1 and the answer
(standing for the target's ICE credentials) reached the finder, opened with the token's key; node1, alive and
linked to node2, saw nothing. The same after `evio member renew node1` a day after the join, node1 running on the
renewed key (third test). Not carried through a real ICE/DTLS handshake here (the tunnel check needs nothing the
finder lacks: it is `TrustAnchor.refusal` on the same certificate).

Severity: medium (the issue's H2 consequences, taking another member's node id and its tunnels, or ending its links,
behind the precondition of a leaked used token in the hands of a member). 0083 itself treated "a used token found
later" as the threat worth closing; the residual keeps the part that matters in trust mode for 28 days.

Suggested fix: the node key is made on the node. `evio join` generates a fresh key and sends a certificate request
signed by it, authorised by the token's one-time secret, to the server host over the session it already opens (the
CA's answer comes back as a member list does), and the token carries no long-lived key: its certificate is issued
to expire with the token (24 h) or not at all. Until then, a shorter certificate in the token plus a renewal at
first login with a node-made key closes the window to the token's own life. Either way `renew` should make
the older certificates of the id worthless (a revocation by certificate serial or by "issued before", spread like
the node-id list), or 0083 should stop naming it as the remedy.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from evio.cli import join_cmd, main
from evio.config.model import TopologyConfig
from evio.node.ring_signaling import RingSignaling
from evio.overlay.adjacency import LinkType
from evio.overlay.negotiation import (
    ACTION_LINK,
    LinkRequest,
    decode_link_answer,
    decode_link_request,
    encode_link_answer,
    encode_link_request,
)
from evio.overlay.orchestrator import Orchestrator, Phase
from evio.server import token as join_token
from evio.server.members import Registry, add_member, renew_member
from evio.signal.errors import ErrorReason, RequestError
from evio.signal.interface import Signaling
from evio.signal.protocol import Body
from evio.testing.fake_server import fake_server_host
from evio.tunnel.path.trust import TrustAnchor

ISSUED = datetime.datetime.now(datetime.UTC).replace(microsecond=0)  # `evio join` checks the token on the real clock
FOUND = ISSUED + datetime.timedelta(days=2)  # in a chat log, a day after the token expired
OFFER = "tunnel.offer"


class NoServer:
    """The server view: the finder's account cannot ask as the victim through the server (0083's test shows it
    dropped as `not_member`), so a request that falls back fails here."""

    async def request(self, overlay: str, peer: int, action: str, body: Body, timeout: float | None = None) -> Body:
        raise RequestError(ErrorReason.REJECTED, "through the server: not as this node id")

    def register_handler(self, action: str, handler: object) -> None:
        pass

    def revoked_nodes(self, overlay: str) -> frozenset[int]:
        return frozenset()


class Tunnel:
    def __init__(self, ring: Ring, src: int, dst: int) -> None:
        self.ring, self.src, self.dst = ring, src, dst

    def send_overlay_signal(self, payload: bytes) -> bool:
        sink = self.ring.sinks[self.dst]
        asyncio.get_running_loop().call_soon(sink, self.src, payload)
        return True


class Relays:
    """A node's tunnels: `at` is the node whose tunnels these are (the finder runs the victim's id on its own)."""

    def __init__(self, ring: Ring, at: int) -> None:
        self.ring, self.at = ring, at

    def relay_signal_to(self, sink: Callable[[int, bytes], None]) -> None:
        self.ring.sinks[self.at] = sink

    def signal_relays(self) -> dict[int, Tunnel]:
        return {p: Tunnel(self.ring, self.at, p) for p in self.ring.links[self.at]}


class Ring:
    def __init__(self, links: list[tuple[int, int]]) -> None:
        self.links: dict[int, set[int]] = {}
        for a, b in links:
            self.links.setdefault(a, set()).add(b)
            self.links.setdefault(b, set()).add(a)
        self.sinks: dict[int, Callable[[int, bytes], None]] = {}


def _keys(cert_pem: str, key_pem: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = serialization.load_pem_private_key(key_pem.encode(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return x509.load_pem_x509_certificate(cert_pem.encode()), key


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[join_token.JoinToken], Path]:
    """node1, node2 and node3 added; node1 joins with `evio join` (its files under tmp_path, the XMPP server faked)."""
    tokens, files, _ = _setup_host(tmp_path, monkeypatch)
    return tokens, files


def _setup_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[join_token.JoinToken], Path, Registry]:
    registry, settings, accounts, relay = fake_server_host(tmp_path / "server", ISSUED)
    texts = [add_member(registry, settings, accounts, relay, "ov1", f"node{i}", ISSUED).token for i in (1, 2, 3)]
    etc = tmp_path / "etc-evio"
    monkeypatch.setattr(join_cmd, "CONFIG_DIR", etc)
    monkeypatch.setattr(join_cmd, "STATE_DIR", tmp_path / "var-lib-evio")
    monkeypatch.setattr(join_cmd, "_open_vswitch_problems", lambda: [])
    monkeypatch.setattr(join_cmd.os, "geteuid", lambda: 0)
    monkeypatch.setattr(join_cmd, "_change_password", accounts.change_password)
    assert main(["join", texts[0], "--no-start"]) == 0
    return [join_token.decode(t, ISSUED) for t in texts], etc / "ov1", registry


def _node(ring: Ring, at: int, node_id: int, keys: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
          anchor: TrustAnchor, served: list[tuple[int, int, Body]] | None = None) -> RingSignaling:  # fmt: skip
    node = RingSignaling(cast(Signaling, NoServer()), "ov1", node_id, *keys, anchor, wall_clock=FOUND.timestamp)
    node.attach(Relays(ring, at))
    if served is not None:

        async def handle(overlay: str, peer: int, body: Body) -> Body:
            served.append((node_id, peer, body))
            return {"ice": "the target's ICE credentials and fingerprint"}

        node.register_handler(OFFER, handle)
    return node


async def _offer(node: RingSignaling, target: int, action: str = OFFER, body: Body | None = None) -> Body | None:
    """`node`'s request to `target` along the ring: its answer, or None when it fell back to the server (refused)."""
    try:
        return await node.request("ov1", target, action, body or {"candidates": ["the sender's"]}, timeout=1.0)
    except RequestError:
        return None


async def test_the_member_running_on_what_evio_join_wrote_is_served_along_the_ring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    (victim, finder, target), files = _setup(tmp_path, monkeypatch)
    anchor = TrustAnchor("ov1", (x509.load_pem_x509_certificate(victim.ca_pem.encode()),))
    ring = Ring([(victim.node_id, target.node_id)])
    served: list[tuple[int, int, Body]] = []
    own = _keys((files / "node.crt").read_text(), (files / "node.key").read_text())
    node1 = _node(ring, victim.node_id, victim.node_id, own, anchor)
    node3_keys = _keys(target.cert_pem, target.key_pem)
    node3 = _node(ring, target.node_id, target.node_id, node3_keys, anchor, served)
    keys = {victim.node_id: own[1].public_key(), target.node_id: node3_keys[1].public_key()}
    for n in (node1, node3):
        n.use_keys(keys.get)
    answer = await _offer(node1, target.node_id)
    assert answer == {"ice": "the target's ICE credentials and fingerprint"}
    assert served == [(target.node_id, victim.node_id, {"candidates": ["the sender's"]})]


async def _finder_offers_as_the_victim(victim: join_token.JoinToken, finder: join_token.JoinToken,
                                      target: join_token.JoinToken,
                                      own: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]) -> None:  # fmt: skip
    """node1 runs on `own`; node2 sends node3 an offer as node1 with the token's certificate and key."""
    anchor = TrustAnchor("ov1", (x509.load_pem_x509_certificate(victim.ca_pem.encode()),))
    # node1 is up and linked to node2; node2 (the finder) has its own tunnel to node3.
    ring = Ring([(victim.node_id, finder.node_id), (finder.node_id, target.node_id)])
    served: list[tuple[int, int, Body]] = []
    node1 = _node(ring, victim.node_id, victim.node_id, own, anchor)
    node3_keys = _keys(target.cert_pem, target.key_pem)
    node3 = _node(ring, target.node_id, target.node_id, node3_keys, anchor, served)
    stolen = _keys(victim.cert_pem, victim.key_pem)  # the used token, decoded with the finder's own clock
    # The finder runs the victim's node id over its own tunnels (it receives on them in place of relaying).
    impostor = _node(ring, finder.node_id, victim.node_id, stolen, anchor)
    keys = {victim.node_id: own[1].public_key(), target.node_id: node3_keys[1].public_key()}
    for n in (node1, node3, impostor):
        n.use_keys(keys.get)
    answer = await _offer(impostor, target.node_id)
    print(f"token expired {victim.expires:%Y-%m-%d}, used by node2 on {FOUND:%Y-%m-%d}: node3 served "
          f"{len(served)} offer(s) as node1, the finder read the answer: {answer}, node1 saw "
          f"{sum(node1.drops.values())} drop(s)")  # fmt: skip
    assert not served, "node3 served an offer signed with the used token's key as node1, sent by node2"
    assert answer is None, "node2 opened node3's answer to node1 with the token's key"


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="review21w2 finding 1: a used token's node key signs "
                   "ring offers as the member and reads their answers (decision 0083's residual)")  # fmt: skip
async def test_a_used_tokens_key_found_by_a_member_is_not_served_as_the_member_along_the_ring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    (victim, finder, target), files = _setup(tmp_path, monkeypatch)
    own = _keys((files / "node.crt").read_text(), (files / "node.key").read_text())  # what `evio join` wrote
    await _finder_offers_as_the_victim(victim, finder, target, own)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="review21w2 finding 1: `evio member renew`, which 0083 "
                   "names as the remedy for a leaked key, leaves the token's certificate valid")  # fmt: skip
async def test_after_evio_member_renew_the_used_tokens_key_is_not_served_as_the_member(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    (victim, finder, target), _, registry = _setup_host(tmp_path, monkeypatch)
    renewed = renew_member(registry, "ov1", "node1", ISSUED + datetime.timedelta(days=1))
    await _finder_offers_as_the_victim(victim, finder, target, _keys(renewed.cert_pem, renewed.key_pem))


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="review21w2 finding 1: a used token's node key ends the "
                   "member's live links along the ring (a link request of another epoch)")  # fmt: skip
async def test_a_used_tokens_key_cannot_end_the_members_live_link_along_the_ring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    (victim, finder, target), files = _setup(tmp_path, monkeypatch)
    anchor = TrustAnchor("ov1", (x509.load_pem_x509_certificate(victim.ca_pem.encode()),))
    ring = Ring([(victim.node_id, target.node_id), (finder.node_id, target.node_id)])
    own = _keys((files / "node.crt").read_text(), (files / "node.key").read_text())
    node1 = _node(ring, victim.node_id, victim.node_id, own, anchor)
    target_keys = _keys(target.cert_pem, target.key_pem)
    node3 = _node(ring, target.node_id, target.node_id, target_keys, anchor)
    impostor = _node(ring, finder.node_id, victim.node_id, _keys(victim.cert_pem, victim.key_pem), anchor)
    keys = {victim.node_id: own[1].public_key(), target.node_id: target_keys[1].public_key()}
    for n in (node1, node3, impostor):
        n.use_keys(keys.get)
    # node3's real link state machine: node1 asked for a successor link (its epoch 7) and the tunnel came up.
    orch = Orchestrator(target.node_id, TopologyConfig(successors=0, long_distance=0), random.Random(1),
                        time.monotonic(), name="ov1")  # fmt: skip
    orch.signal_connected(time.monotonic())
    for peer in (victim.node_id, finder.node_id):
        orch.peer_added(peer, time.monotonic())

    async def handle(overlay: str, peer: int, body: Body) -> Body:
        answer, _ = orch.link_request(peer, decode_link_request(body), time.monotonic())
        return encode_link_answer(answer)

    node3.register_handler(ACTION_LINK, handle)
    ask = encode_link_request(LinkRequest(LinkType.SUCCESSOR, epoch=7))
    assert decode_link_answer(await node1.request("ov1", target.node_id, ACTION_LINK, ask, timeout=1.0)).accepted
    orch.tunnel_up(victim.node_id, "t1", "tap1", time.monotonic())
    assert orch.phase(victim.node_id) is Phase.UP
    # The finder, over its own tunnel to node3, as node1 "restarted":
    forged = encode_link_request(LinkRequest(LinkType.SUCCESSOR, epoch=8))
    # Its answer goes to node1 itself (linked to node3), which drops it as unexpected: the finder needs none.
    await _offer(impostor, target.node_id, ACTION_LINK, forged)
    print(f"node3's live link to node1 after a ring request signed with node1's used token, from node2: "
          f"{orch.phase(victim.node_id).value}")  # fmt: skip
    assert orch.phase(victim.node_id) is Phase.UP, "the token's key ended node1's live link at node3"
