"""nat_traversal.underlay_families: the key, its way to ICE and the MTU, and pairs of one family (decision 0048)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import aioice
import aioice.stun
import pytest
from aioice import Candidate

from evio.config import ConfigError, loads_config
from evio.config.model import split_host_port
from evio.node.plan import plan_node
from evio.tunnel.config import from_overlay_config
from evio.tunnel.errors import IceFailed
from evio.tunnel.path.candidates import family_of, underlay_ipv6_addresses
from evio.tunnel.path.ice import IceAgent, IceConfig, RelayPolicy

LOOPBACKS = ("127.0.0.2", "::1")


def document(nat: dict[str, Any] | None = None, **overlay: Any) -> dict[str, Any]:
    ov = {"signal": {"jid": "node1@overlay.test", "password": "pw"}, **overlay}
    if nat is not None:
        ov["nat_traversal"] = nat
    return {"overlays": {"ov1": ov}}


def problems(doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        loads_config(json.dumps(doc))
    return {p.path: p.reason for p in caught.value.problems}


# -- the key -------------------------------------------------------------------------------------------


def test_both_families_by_default_one_or_both_when_given() -> None:
    assert loads_config(json.dumps(document())).overlays["ov1"].nat_traversal.underlay_families == ("ipv4", "ipv6")
    for families in (["ipv6"], ["ipv4"], ["ipv6", "ipv4"]):
        overlay = loads_config(json.dumps(document({"underlay_families": families}))).overlays["ov1"]
        assert overlay.nat_traversal.underlay_families == tuple(families)


@pytest.mark.parametrize(("families", "path", "words"), [
    (["ipv5"], "$.overlays.ov1.nat_traversal.underlay_families[0]", "ipv4"),
    (["ipv4", "IPv6"], "$.overlays.ov1.nat_traversal.underlay_families[1]", "ipv6"),
    (["ipv6", "ipv6"], "$.overlays.ov1.nat_traversal.underlay_families", "unique"),
    ([], "$.overlays.ov1.nat_traversal.underlay_families", "names no family"),
    ("ipv6", "$.overlays.ov1.nat_traversal.underlay_families", "array"),
])  # fmt: skip
def test_a_bad_value_is_reported_at_its_json_path(families: Any, path: str, words: str) -> None:
    found = problems(document({"underlay_families": families}))
    assert list(found) == [path], found
    assert words in found[path].lower() or words in found[path], found[path]


def test_servers_are_given_by_ipv6_address_in_brackets_or_by_name() -> None:
    nat = {"stun": ["[2001:db8::1]:3478", "stun.example.net:3478"],
           "turn": [{"server": "[2001:db8::1]:3478", "username": "u", "password": "p"}]}
    doc = document(nat)
    doc["overlays"]["ov1"]["signal"]["server"] = "2001:db8::1"
    overlay = loads_config(json.dumps(doc)).overlays["ov1"]
    assert overlay.signal.server == "2001:db8::1" and overlay.signal.port == 5222
    ice = from_overlay_config(overlay, host_ipv6=True).ice
    assert ice.stun == (("2001:db8::1", 3478), ("stun.example.net", 3478))
    assert (ice.turn[0].host, ice.turn[0].port) == ("2001:db8::1", 3478)
    assert split_host_port("[::ffff:192.0.2.1]:1") == ("::ffff:192.0.2.1", 1)
    bad = document({"stun": ["2001:db8::1:3478"]})
    assert list(problems(bad)) == ["$.overlays.ov1.nat_traversal.stun[0]"]  # a bare IPv6 address has no port


# -- to ICE and the MTU --------------------------------------------------------------------------------


@pytest.mark.parametrize(("families", "host_ipv6", "v4", "v6", "mtu"), [
    (["ipv4", "ipv6"], False, True, False, 1428),  # the host has no IPv6: nothing changes
    (["ipv4", "ipv6"], True, True, True, 1408),  # dual stack: room for the 40-byte header on every path
    (["ipv4"], True, True, False, 1428),
    (["ipv6"], True, False, True, 1408),
])  # fmt: skip
def test_families_reach_ice_and_the_tap_mtu_leaves_room_for_the_ipv6_header(
    families: list[str], host_ipv6: bool, v4: bool, v6: bool, mtu: int
) -> None:
    overlay = loads_config(json.dumps(document({"underlay_families": families}))).overlays["ov1"]
    settings = from_overlay_config(overlay, host_ipv6=host_ipv6)
    assert (settings.ice.use_ipv4, settings.ice.use_ipv6) == (v4, v6)
    assert settings.tap_mtu == mtu
    # The largest frame on an IPv6 relayed path: IPv6 + UDP + TURN channel + record + Ethernet fits 1500.
    from evio.tunnel.datapath.mtu import IPV6_HEADER_LEN, UDP_HEADER_LEN, max_datagram_len

    if v6:
        assert IPV6_HEADER_LEN + UDP_HEADER_LEN + max_datagram_len(settings.tap_mtu) <= 1500


def test_the_plan_asks_the_host_for_ipv6_outside_the_overlays_and_the_bridge_follows_the_tunnels() -> None:
    doc = document(bridge={"name": "evbr1", "address": "fd10::1/64"})
    config = loads_config(json.dumps(doc))
    asked: list[tuple[str, ...]] = []

    def addresses(excluded: Any) -> list[str]:
        asked.append(tuple(excluded))
        return ["2001:db8::5"]

    plan = plan_node(config, 7, controller_port=16653, kernel_module_loaded=False, ipv6_addresses=addresses)
    assert asked == [("fd10::/64",)]  # the overlay's own subnet is no underlay
    assert plan.overlays[0].tunnel.ice.use_ipv6 and plan.overlays[0].bridge.mtu == 1408
    plain = plan_node(config, 7, controller_port=16653, kernel_module_loaded=False)
    assert not plain.overlays[0].tunnel.ice.use_ipv6 and plain.overlays[0].bridge.mtu == 1428
    doc["overlays"]["ov1"]["bridge"]["mtu"] = 1300
    assert plan_node(loads_config(json.dumps(doc)), 7, controller_port=16653, kernel_module_loaded=False,
                     ipv6_addresses=addresses).overlays[0].bridge.mtu == 1300  # the operator's, when given


def test_the_host_ipv6_addresses_leave_out_loopback_link_local_and_the_overlays() -> None:
    found = underlay_ipv6_addresses()
    assert all(not a.is_loopback and not a.is_link_local for a in found)
    assert not underlay_ipv6_addresses(exclude=("::/0",))
    assert family_of("::ffff:192.0.2.1") == 4 and family_of("2001:db8::1") == 6 and family_of("x.local") is None


# -- pairs of one family -------------------------------------------------------------------------------


def test_aioice_pairs_candidates_of_one_family_only() -> None:
    v4 = Candidate("1", 1, "udp", 100, "192.0.2.1", 1000, "host")
    v6 = Candidate("2", 1, "udp", 100, "2001:db8::1", 1000, "host")
    assert v4.can_pair_with(v4) and v6.can_pair_with(v6)
    assert not v4.can_pair_with(v6) and not v6.can_pair_with(v4)


@pytest.fixture
def loopbacks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # aioice never gathers loopback; here it is the host's one IPv4 and one IPv6 address.
    def addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [a for a in LOOPBACKS if (use_ipv6 if ":" in a else use_ipv4)]

    monkeypatch.setattr(aioice.ice, "get_host_addresses", addresses)
    yield


async def link(a_config: IceConfig, b_config: IceConfig) -> tuple[IceAgent, IceAgent, tuple[str, int]]:
    a, b = IceAgent(a_config, True, "a", 0.0), IceAgent(b_config, False, "b", 0.0)
    try:
        (a_direct, _), (b_direct, _) = await asyncio.gather(a.gather(), b.gather())
        await asyncio.gather(a.set_remote(b_direct, None), b.set_remote(a_direct, None))
        path = await a.select_controlling()
        await path.send(b"\x16dtls")  # the first DTLS datagram the controlled side follows
        followed, first = await b.select_controlled()
        assert first == b"\x16dtls"
        assert followed.remote_addr[0] in LOOPBACKS
        return a, b, path.remote_addr
    except BaseException:
        await asyncio.gather(a.close(), b.close())
        raise


def families_paired(agent: IceAgent) -> set[tuple[int | None, int | None]]:
    assert agent.direct is not None
    return {(family_of(p.local_candidate.host), family_of(p.remote_candidate.host)) for p in agent.direct._check_list}


@pytest.mark.usefixtures("loopbacks")
async def test_a_dual_stack_and_an_ipv6_only_agent_link_over_ipv6_and_pair_nothing_across_families() -> None:
    dual = IceConfig(relay=RelayPolicy.NEVER, use_ipv4=True, use_ipv6=True)
    v6 = IceConfig(relay=RelayPolicy.NEVER, use_ipv4=False, use_ipv6=True)
    a, b, remote = await link(dual, v6)
    try:
        assert ipaddress.ip_address(remote[0]).version == 6
        assert {c.host for c in b.direct.local_candidates} == {"::1"}  # type: ignore[union-attr]
        assert families_paired(a) == {(6, 6)} and families_paired(b) == {(6, 6)}
    finally:
        await asyncio.gather(a.close(), b.close())


@pytest.mark.usefixtures("loopbacks")
async def test_an_ipv4_only_and_an_ipv6_only_agent_have_no_pair_and_fail() -> None:
    v4 = IceConfig(relay=RelayPolicy.NEVER, use_ipv4=True, use_ipv6=False, direct_timeout=0.5)
    v6 = IceConfig(relay=RelayPolicy.NEVER, use_ipv4=False, use_ipv6=True, direct_timeout=0.5)
    a, b = IceAgent(v4, True, "a", 0.0), IceAgent(v6, False, "b", 0.0)
    try:
        (a_direct, _), (b_direct, _) = await asyncio.gather(a.gather(), b.gather())
        await asyncio.gather(a.set_remote(b_direct, None), b.set_remote(a_direct, None))
        assert a.direct is not None and not a.direct._check_list
        with pytest.raises(IceFailed):
            await a.select_controlling()
    finally:
        await asyncio.gather(a.close(), b.close())


# -- server-reflexive candidates over IPv6 ---------------------------------------------------------------


class MappingStun(asyncio.DatagramProtocol):
    """A STUN server behind which every client appears at one address, as behind NAT66 or NPTv6 (a fake:
    unit tier; the lab's IPv6 has no translation, so its mappings are the hosts' own addresses)."""

    def __init__(self, mapped: tuple[str, int]) -> None:
        self.mapped = mapped
        self.asked: list[tuple[str, int]] = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        request = aioice.stun.parse_message(data)
        self.asked.append((addr[0], addr[1]))
        response = aioice.stun.Message(message_method=request.message_method,
                                       message_class=aioice.stun.Class.RESPONSE,
                                       transaction_id=request.transaction_id)
        response.attributes["XOR-MAPPED-ADDRESS"] = self.mapped
        assert self.transport is not None
        self.transport.sendto(bytes(response), addr)


@pytest.mark.usefixtures("loopbacks")
async def test_a_stun_server_by_ipv6_address_gives_ipv6_server_reflexive_candidates() -> None:
    loop = asyncio.get_running_loop()
    transport, server = await loop.create_datagram_endpoint(lambda: MappingStun(("2001:db8::99", 4242)),
                                                            local_addr=("::1", 0))
    port = transport.get_extra_info("sockname")[1]
    agent = IceAgent(IceConfig(stun=(("::1", port),), relay=RelayPolicy.NEVER, use_ipv6=True), True, "a", 0.0)
    try:
        direct, _ = await agent.gather()
        assert direct is not None
        srflx = [c for c in agent.direct.local_candidates if c.type == "srflx"]  # type: ignore[union-attr]
        assert [(c.host, c.port, c.related_address) for c in srflx] == [("2001:db8::99", 4242, "::1")]
        assert any("2001:db8::99 4242 typ srflx" in c for c in direct.candidates)
        assert [a for a, _ in server.asked] == ["::1"]  # the IPv4 socket was not sent to an IPv6 server
    finally:
        await agent.close()
        transport.close()


# -- screening IPv6 candidates ---------------------------------------------------------------------------


def test_ipv6_candidates_are_screened_as_ipv4_ones_ulas_tried_the_overlays_left_out() -> None:
    from evio.tunnel.path.candidates import CandidateDrop, CandidatePolicy, LocalNetworks, candidate_drop

    local = LocalNetworks.of([ipaddress.ip_interface("2001:db8:2::2/64")])
    policy = CandidatePolicy(overlay=(ipaddress.ip_network("fd10::/64"),))
    assert candidate_drop("fd12:3456::7", False, policy, local) is None  # a ULA: a peer of the same site
    assert candidate_drop("fd10::9", False, policy, local) is CandidateDrop.OVERLAY
    assert candidate_drop("fe80::1%eth0", False, policy, local) is CandidateDrop.LINK_LOCAL
    assert candidate_drop("2001:db8:2::2", False, policy, local) is CandidateDrop.OWN_ADDRESS
    assert candidate_drop("2001:db8::101", False, policy, local) is None


async def test_an_excluded_ipv6_network_is_not_gathered(monkeypatch: pytest.MonkeyPatch) -> None:
    # ::1 stands for an overlay bridge's IPv6 address (the one IPv6 address every test host can bind).
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.2", "::1"])
    config = IceConfig(relay=RelayPolicy.NEVER, use_ipv6=True, exclude_networks=("::1/128",))
    excluding, plain = IceAgent(config, True, "a", 0.0), IceAgent(replace(config, exclude_networks=()), True, "b", 0.0)
    try:
        (direct, _), _ = await asyncio.gather(excluding.gather(), plain.gather())
        assert {c.host for c in excluding.direct.local_candidates} == {"127.0.0.2"}  # type: ignore[union-attr]
        assert {c.host for c in plain.direct.local_candidates} == {"127.0.0.2", "::1"}  # type: ignore[union-attr]
        assert direct is not None and not any(" ::1 " in c for c in direct.candidates)
    finally:
        await asyncio.gather(excluding.close(), plain.close())
