"""An L2 policy given by a reload: planned apart from restarts, sent to the SDN side, shown per rule (fake parts)."""

from __future__ import annotations

import dataclasses

from evio.config.model import Config, PolicyRule
from evio.node.metrics import families
from evio.node.plan import NodePlan, plan_node
from evio.node.reload import plan_reload
from evio.sdn.boundary import PolicyCounts, SetPolicy
from evio.sdn.l2policy import RuleCount
from evio.testing.node_fleet import Fleet, fleet_config, nid
from evio.testing.waiting import wait_until as until

RULES = (PolicyRule("drop", name="no-icmpv6", in_port="members", ip_proto=58), PolicyRule("allow"))


def with_policy(config: Config, rules: tuple[PolicyRule, ...]) -> Config:
    ov1 = dataclasses.replace(config.overlays["ov1"], policy=rules)
    return dataclasses.replace(config, overlays={**config.overlays, "ov1": ov1})


def plan_of(config: Config) -> NodePlan:
    return plan_node(config, nid(1), controller_port=6653, kernel_module_loaded=False)


def test_a_new_policy_keeps_the_overlay_and_says_so() -> None:
    running = plan_of(fleet_config(1))
    change = plan_reload(running, plan_of(with_policy(fleet_config(1), RULES)))
    assert change.policy == {"ov1": RULES}
    assert not change.restarted and not change.changes_nothing
    assert change.summary() == "new policy for ov1"
    assert plan_reload(change.plan, plan_of(with_policy(fleet_config(1), RULES))).changes_nothing


async def test_reload_sends_the_policy_to_the_sdn_side_without_a_link_going_down() -> None:
    fleet = Fleet(2)
    await fleet.start()
    try:
        node = fleet.nodes[1]
        stack = node.overlays["ov1"]
        await until(lambda: stack.tunnels_up == 1, 10)
        await node.reload(plan_of(with_policy(fleet_config(1), RULES)))
        sdn = fleet.platforms[1].sdn
        sdn.sync()
        assert [c for c in sdn.history if isinstance(c, SetPolicy)] == [SetPolicy("ov1", RULES)]
        assert sdn.attached["ov1"].policy == RULES
        # The SDN side's counts become the status's rules, and the metrics'.
        stack.controller_event(PolicyCounts("ov1", (RuleCount("no-icmpv6", "drop", "members", 5, 2),
                                                     RuleCount("rule-2", "allow", "any", 40, 0))))
        assert node.status()["overlays"]["ov1"]["policy"] == [
            {"rule": "no-icmpv6", "action": "drop", "in_port": "members", "packets": 7, "frb_packets": 2},
            {"rule": "rule-2", "action": "allow", "in_port": "any", "packets": 40, "frb_packets": 0},
        ]
        text = {m.name: m for m in families(node.status())}
        samples = {(s.labels["rule"], s.labels["action"]): s.value for s in text["evio_policy_packets"].samples
                   if s.name.endswith("_total")}
        assert samples == {("no-icmpv6", "drop"): 7, ("rule-2", "allow"): 40}
        # Taking the rules out again: none left, counts gone, and still the one tunnel it had.
        await node.reload(plan_of(fleet_config(1)))
        assert node.status()["overlays"]["ov1"]["policy"] == []
        assert stack.tunnels_up == 1 and stack.tunnels_down == 0
    finally:
        await fleet.stop_all()


def test_evio_status_shows_each_rule_and_what_it_dropped() -> None:
    from evio.cli.status_cmd import render_status

    policy = [{"rule": "no-icmpv6", "action": "drop", "in_port": "members", "packets": 7, "frb_packets": 2},
              {"rule": "rule-2", "action": "allow", "in_port": "any", "packets": 40, "frb_packets": 0}]
    text = render_status({"node_id": "ab" * 16, "pid": 1, "uptime": 75, "overlays": {"ov1": {
        "signal": {"jid": "n@x", "server": "x:5222", "connected": True}, "links": [], "policy": policy}}}, now=0.0)
    assert text.splitlines()[-3:] == [
        "  policy: 2 rules, first match decides, no match allows",
        "    no-icmpv6: drop from members, dropped 7 (2 in FRBs)",
        "    rule-2: allow from any, allowed 40",
    ]


def with_servers(config: Config, servers: tuple[str, ...]) -> Config:
    ov1 = config.overlays["ov1"]
    signal = dataclasses.replace(ov1.signal, server="", servers=servers)
    return dataclasses.replace(config, overlays={**config.overlays, "ov1": dataclasses.replace(ov1, signal=signal)})


def test_new_xmpp_servers_keep_the_overlay_a_new_password_restarts_it() -> None:
    """Decision 0051: moving a member onto a cluster (server -> servers) costs no tunnel."""
    running = plan_of(fleet_config(1))
    cluster = ("xmpp1.test:5222", "xmpp2.test:5222")
    change = plan_reload(running, plan_of(with_servers(fleet_config(1), cluster)))
    assert change.servers == {"node1@x.test": (("xmpp1.test", 5222), ("xmpp2.test", 5222))}
    assert not change.restarted and not change.accounts_stopped and not change.changes_nothing
    assert change.summary() == "new XMPP servers for node1@x.test"
    assert plan_reload(change.plan, plan_of(with_servers(fleet_config(1), cluster))).changes_nothing
    ov1 = fleet_config(1).overlays["ov1"]
    other = dataclasses.replace(ov1, signal=dataclasses.replace(ov1.signal, password="other"))
    repassword = plan_reload(running, plan_of(dataclasses.replace(fleet_config(1), overlays={"ov1": other})))
    assert repassword.restarted == ("ov1",) and not repassword.servers


async def test_reload_hands_the_servers_to_the_account_without_a_link_going_down() -> None:
    fleet = Fleet(2)
    await fleet.start()
    try:
        node = fleet.nodes[1]
        stack = node.overlays["ov1"]
        await until(lambda: stack.tunnels_up == 1, 10)
        handed: list[tuple[tuple[str, int], ...]] = []
        node.accounts["node1@x.test"].use_servers = handed.append  # type: ignore[method-assign]
        await node.reload(plan_of(with_servers(fleet_config(1), ("xmpp1.test:5222", "xmpp2.test:5222"))))
        assert handed == [(("xmpp1.test", 5222), ("xmpp2.test", 5222))]
        assert node.overlays["ov1"] is stack and stack.tunnels_up == 1 and stack.tunnels_down == 0
    finally:
        await fleet.stop_all()
