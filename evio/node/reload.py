"""What a config reload changes: the running plan against the one the new config gives (pure).

An overlay is
- *kept* when its signaling account and bridge are unchanged: its tunnels
  stay up; new topology settings go to its overlay controller (links no
  longer wanted are released as on any re-evaluation), new tunnel
  settings apply to the tunnels it sets up from then on, a new `attach`
  list puts its interfaces on the bridge and takes off those it dropped,
  and a new L2 policy goes to the SDN controller, which changes the
  bridge's table-0 flows only;
- *restarted* when its bridge or its account changed (credentials, or the
  overlays one shared account serves: an XMPP login's memberships are
  fixed), since its tunnels and bridge depend on them; an account whose
  servers alone changed is handed the new list (`servers`: several servers of
  one service, evio.signal.failover) and its overlays are kept;
- *added* or *removed* otherwise.

Kept overlays keep their TAP prefix, so the ports on their bridges keep their
names whatever order the overlays now have in the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from evio.config.model import PolicyRule, TopologyConfig
from evio.node.plan import AccountPlan, NodePlan, OverlayPlan, tap_prefix
from evio.tunnel.config import TunnelSettings


@dataclass(frozen=True)
class ReloadPlan:
    plan: NodePlan  # what runs once the reload is done (kept overlays with their TAP prefixes)
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    topology: dict[str, TopologyConfig] = field(default_factory=dict)  # kept overlays with new settings
    tunnel: dict[str, TunnelSettings] = field(default_factory=dict)
    attach: dict[str, tuple[str, ...]] = field(default_factory=dict)  # kept overlays whose attached ports changed
    policy: dict[str, tuple[PolicyRule, ...]] = field(default_factory=dict)  # kept overlays with a new L2 policy
    accounts_stopped: tuple[str, ...] = ()  # JIDs logged out (removed, or changed and logged in again)
    accounts_started: tuple[str, ...] = ()
    servers: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)  # kept accounts with new servers
    metrics_changed: bool = False

    @property
    def changes_nothing(self) -> bool:
        return not (self.added or self.removed or self.restarted or self.topology or self.tunnel or self.attach or self.policy
                    or self.accounts_stopped or self.accounts_started or self.servers or self.metrics_changed)

    def summary(self) -> str:
        parts = [f"{what} {', '.join(ids)}" for what, ids in (
            ("added", self.added), ("removed", self.removed), ("restarted", self.restarted),
            ("new topology for", tuple(self.topology)), ("new tunnel settings for", tuple(self.tunnel)),
            ("new attached ports for", tuple(self.attach)),
            ("new policy for", tuple(self.policy)), ("new XMPP servers for", tuple(self.servers)),
        ) if ids]  # fmt: skip
        if self.metrics_changed:
            parts.append("metrics endpoint changed")
        return "; ".join(parts) or "nothing changed"


class ReloadRefused(Exception):
    """The new config cannot be applied to the running node (it needs a restart)."""


def plan_reload(old: NodePlan, new: NodePlan) -> ReloadPlan:
    if new.node_id != old.node_id:
        raise ReloadRefused("the node id changed; restart the daemon to take a new identity")
    old_accounts = {a.jid: a for a in old.accounts}
    new_accounts = {a.jid: a for a in new.accounts}
    changed_accounts = {jid for jid in old_accounts.keys() | new_accounts.keys()
                        if old_accounts.get(jid) != new_accounts.get(jid)}
    servers = {jid: new_accounts[jid].settings.servers for jid in changed_accounts
               if _only_servers_differ(old_accounts.get(jid), new_accounts.get(jid))}  # fmt: skip
    changed_accounts -= servers.keys()
    old_overlays = {o.id: o for o in old.overlays}
    new_overlays = {o.id: o for o in new.overlays}

    kept: dict[str, OverlayPlan] = {}
    restarted, removed, added = [], [], []
    topology: dict[str, TopologyConfig] = {}
    tunnel: dict[str, TunnelSettings] = {}
    attach: dict[str, tuple[str, ...]] = {}
    policy: dict[str, tuple[PolicyRule, ...]] = {}
    for overlay_id, running in old_overlays.items():
        wanted = new_overlays.get(overlay_id)
        if wanted is None:
            removed.append(overlay_id)
        elif running.account != wanted.account or running.account in changed_accounts or _bridge(running) != _bridge(wanted):
            restarted.append(overlay_id)
        else:
            settings = replace(wanted.tunnel, tap_prefix=running.tunnel.tap_prefix)
            kept[overlay_id] = replace(wanted, tunnel=settings)
            if wanted.config.topology != running.config.topology:
                topology[overlay_id] = wanted.config.topology
            if settings != running.tunnel:
                tunnel[overlay_id] = settings
            if wanted.config.attach != running.config.attach:
                attach[overlay_id] = wanted.config.attach
            if wanted.config.policy != running.config.policy:
                policy[overlay_id] = wanted.config.policy
    added = [overlay_id for overlay_id in new_overlays if overlay_id not in old_overlays]

    # New and restarted overlays take TAP prefixes the kept ones do not use.
    taken = {plan.tunnel.tap_prefix for plan in kept.values()}
    overlays: list[OverlayPlan] = []
    for overlay_id, wanted in new_overlays.items():
        if overlay_id in kept:
            overlays.append(kept[overlay_id])
            continue
        prefix = wanted.tunnel.tap_prefix
        index = 0
        while prefix in taken:
            prefix = tap_prefix(index)
            index += 1
        taken.add(prefix)
        overlays.append(replace(wanted, tunnel=replace(wanted.tunnel, tap_prefix=prefix)))

    accounts_stopped = tuple(jid for jid in old_accounts if jid in changed_accounts)
    accounts_started = tuple(jid for jid in new_accounts if jid in changed_accounts)
    return ReloadPlan(
        plan=replace(new, overlays=tuple(overlays)),
        added=tuple(added),
        removed=tuple(removed),
        restarted=tuple(restarted),
        topology=topology,
        tunnel=tunnel,
        attach=attach,
        policy=policy,
        accounts_stopped=accounts_stopped,
        accounts_started=accounts_started,
        servers=servers,
        metrics_changed=old.metrics_listen != new.metrics_listen,
    )


def _only_servers_differ(old: AccountPlan | None, new: AccountPlan | None) -> bool:
    """Whether the account is the same but for the servers it signs in to (a session elsewhere is the same)."""
    if old is None or new is None:
        return False
    s = new.settings
    return replace(old, settings=replace(old.settings, server=s.server, port=s.port,
                                         failover_servers=s.failover_servers)) == new  # fmt: skip


def _bridge(plan: OverlayPlan) -> tuple[object, ...]:
    # ipv6_routers and their addresses: the switch's RA guard takes them at attach (decision 0068); a new list
    # restarts the overlay.
    return (plan.bridge, plan.datapath, plan.datapath_id, plan.config.bridge, plan.config.ipv6_routers,
            plan.config.ipv6_router_addresses)


def accounts_of(plan: NodePlan, jids: tuple[str, ...]) -> list[AccountPlan]:
    return [account for account in plan.accounts if account.jid in jids]
