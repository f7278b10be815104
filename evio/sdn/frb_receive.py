"""The FRBs a bridge receives from its peers: floods passed on within their bounds, leaf announcements, link checks.

A part of `BoundedFloodSwitch` (evio.sdn.switch) in a file of its own, as wireguard-go keeps a
device's receive side in `receive.go`: functions of the switch, which keeps all the state (its
learning table, flood budget, counters). Pure, as the switch is: frames and `now` in,
`evio.sdn.flow_actions` out.

- A BROADCAST is learned from (its source MAC under its root, with its hop count), delivered to the
  leaf ports (or only to the leaf the destination is learned on) and passed on within its bound; a
  BROADCAST_REVERSE (a broadcast's header sent the other way round the ring) is learned from and
  passed on, never delivered (docs/design.md, "Learning and unicast flows").
- A broadcast of the signed documents' flood whose source MAC another member announced is not delivered
  (`_document_not_its_owners`): the daemon reading it knows its sender by that MAC alone.
- A flood must come the way one from its root could have come (`_plausible`; an adjacent root's by its
  own link, `_detours_its_root`), else it is dropped; one under a root whose floods come by another peer
  brings MACs new here only within that port's small budget (`_contested`);
  a copy from a peer that is not its root cannot claim fewer than 2 hops (`_hops`); floods passed on
  for one ingress port share its total, each root its share (`_flood_budget_key`, flood_shares.py), and a
  contested copy is passed on from its root's share on the way held (review21v1 finding 2).
- A LEAF_ANNOUNCE is taken only for the announcing peer's own root; the first one from a peer since
  its port came is answered with ours. A LINK_CHECK is answered with a LINK_ACK.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from evio.ids import RING_SIZE, format_node_id
from evio.sdn import frb, router_adverts
from evio.sdn.flooding_bounds import forward_bounds, mirror, reverse_forward_bounds
from evio.sdn.flow_actions import FlowAction, PacketOut
from evio.sdn.learning_table import Change, LearnedMac
from evio.sdn.switch_terms import (
    HOST_CLAIMS_ETHERTYPE,
    SIGNED_DOCUMENTS_ETHERTYPE,
    Drop,
    FloodedAnnouncement,
    SwitchPort,
    flows_of_macs,
    parse_ethernet,
)

if TYPE_CHECKING:
    from evio.sdn.switch import BoundedFloodSwitch

log = logging.getLogger(__name__)

# How long after an adjacent root's end of our link stood (its leaf announcement came) a copy of its flood may
# still come by another way: one it sent the long way round just before. Far above an overlay path's latency.
ROOT_LINK_GRACE = 2.0
# MACs new here that a peer may bring, a second, under one root whose floods come by another peer (`_contested`),
# and under all such roots: far above how fast a member's hosts appear, and all together below what fills a port's
# share of a learning table within a MAC's max age (2,048 in 300 s, 6.8 a second), here or past here.
CONTESTED_NEW_RATE, CONTESTED_NEW_BURST = 1.0, 10
CONTESTED_PORT_RATE, CONTESTED_PORT_BURST = 4.0, 100
_FLOOD_KINDS = (frb.FrbType.BROADCAST, frb.FrbType.BROADCAST_REVERSE)
_VLAN_TAGS = (b"\x81\x00", b"\x88\xa8")  # 802.1Q and 802.1ad
FLOOD_WAYS = 2 * 8192  # roots' ways held (two directions each): members, or roots with MACs in the learning table


def frb_in(sw: BoundedFloodSwitch, port: SwitchPort, ingress: int, data: bytes, now: float) -> list[FlowAction]:
    """An FRB that peer `ingress` sent on `port` (the switch checked that it is a peer port)."""
    try:
        frame = frb.parse(data)
    except frb.FrbParseError as err:
        if err.reason is frb.FrbReason.UNKNOWN_TYPE:
            return _unknown_type(sw, port, ingress, now)
        sw.drops[Drop.MALFORMED_FRB] += 1
        sw.frb_parse_errors[err.reason] += 1
        if sw._bad_input_logged.should_log(ingress, now):
            log.warning("malformed FRB dropped peer=%s port=%s reason=%s (dropped so far: %d)",
                        format_node_id(ingress), port.port_no, err.reason.name, sw.drops[Drop.MALFORMED_FRB])
        return []
    h = frame.header
    flood = h.frb_type in (frb.FrbType.BROADCAST, frb.FrbType.BROADCAST_REVERSE)
    if flood and h.root_nid != sw.node_id and (not _plausible(sw, h, ingress) or _detours_its_root(sw, h, ingress, now)):
        sw._bounded(Drop.IMPLAUSIBLE_FRB, port.port_no, now,
                    f"peer={format_node_id(ingress)} root={format_node_id(h.root_nid)}")
        return []
    if flood:
        key = _flood_budget_key(sw, port, h)
        # A root not known before its first copy (members not told) is known from it on: that copy's way is held too.
        contested = ((key[1] is not None or sw.members is None) and h.root_nid != sw.node_id
                     and _contested(sw, h, port.port_no, ingress, now))
        # A contested copy is passed on from its root's share on the way held (review21v1 finding 2, flood_shares.py).
        held = sw._flood_ways[(h.root_nid, h.frb_type)][0] if contested else None
        receive = _broadcast_in if h.frb_type is frb.FrbType.BROADCAST else _reverse_in
        return receive(sw, port.port_no, ingress, frame, now, key, held)
    if h.frb_type is frb.FrbType.LEAF_ANNOUNCE:
        if h.root_nid != ingress:
            sw.drops[Drop.FOREIGN_ANNOUNCE] += 1  # only a root speaks for its own leaves
            return []
        own = sw._own_macs()
        leaves = [mac for mac in frame.leaf_macs if mac not in own]
        if len(leaves) < len(frame.leaf_macs):
            sw.drops[Drop.LOCAL_MAC_CLAIMED] += 1
        if sw.mac_owners:  # another member's signed announcement holds these: not this peer's to place
            owned = [mac for mac in leaves if sw.mac_owners.get(mac, h.root_nid) not in (h.root_nid, sw.node_id)]
            if owned:
                sw._bounded(Drop.NOT_ANNOUNCER, port.port_no, now, f"{len(owned)} MACs in a leaf announcement")
                sw.drops[Drop.NOT_ANNOUNCER] += len(owned) - 1
                leaves = [mac for mac in leaves if mac not in set(owned)]
        for mac in leaves:
            sw._vouch_if_sending(mac, now)
        announced = sw.learning.announce(h.root_nid, leaves, port.port_no, now)
        actions: list[FlowAction] = []
        for learned in announced.learned:
            if learned.change is Change.REFUSED:
                sw.drops[Drop.LOCAL_MAC_CLAIMED if learned.entry.local else Drop.TABLE_FULL] += 1
                continue
            if learned.change is Change.CONTESTED:
                sw._bounded(Drop.MOVE_REFUSED, port.port_no, now, f"mac={learned.mac} announced")
                continue
            actions += flows_of_macs(learned.evicted)
            if learned.change is Change.MOVED and learned.previous is not None:
                actions += flows_of_macs([learned.mac])
        actions += flows_of_macs(announced.withdrawn)
        log.debug("leaf announcement port=%s root=%s macs=%d changes=%s", port.port_no,
                  format_node_id(h.root_nid), len(leaves), [item.change.value for item in announced.learned])
        if port.port_no not in sw._announced_by:
            # The first from this peer since its port came: answer with ours. Ours went out when the port
            # came here, and is lost if the peer's end was not on its bridge yet (the two ends' ports are
            # added 0.02-0.2 s apart); until the peer learns our MACs by this link, it sends them the old
            # way, into a dead link when this one stands in for it (E4). Once per port, so two ends answer
            # each other at most once.
            sw._announced_by.add(port.port_no)
            sw._root_links.setdefault(ingress, now)
            actions += sw._leaf_announce(port)
        return actions
    if h.frb_type is frb.FrbType.LINK_CHECK:
        ack = frb.link_ack(frame.src, frb.parse_mac(sw.switch_mac), sw.node_id)
        return [PacketOut(port.port_no, frb.pack(ack))]
    if h.frb_type is frb.FrbType.LINK_ACK:
        return []  # liveness is the tunnel's business; nothing to switch
    sw.drops[Drop.FORWARD_TYPE] += 1
    return []


def _unknown_type(sw: BoundedFloodSwitch, port: SwitchPort, ingress: int, now: float) -> list[FlowAction]:
    """A newer node's FRB type: not ours to read nor to forward; counted apart from malformed ones."""
    sw.drops[Drop.UNKNOWN_FRB_TYPE] += 1
    if sw._bad_input_logged.should_log(ingress, now):
        log.info("FRB of an unknown type ignored peer=%s port=%s (a newer release's; ignored so far: %d)",
                 format_node_id(ingress), port.port_no, sw.drops[Drop.UNKNOWN_FRB_TYPE])
    return []


def _plausible(sw: BoundedFloodSwitch, h: frb.FrbHeader, ingress: int) -> bool:
    """Whether a flood rooted at `h.root_nid` could reach us from `ingress` with `h.bound_nid`.

    A broadcast runs clockwise from its root, every hop inside the arc it was handed, which never
    passes the root (flooding_bounds.py); a reverse copy runs the mirrored way. So the peer it comes
    from is the root or lies on the arc from the root to us, and the bound lies at or past us, at the
    root at the farthest. A member forging a copy may name only roots behind it, not any node of the overlay.
    """
    root, bound, me = h.root_nid, h.bound_nid, sw.node_id
    if h.frb_type is frb.FrbType.BROADCAST_REVERSE:
        root, bound, me, ingress = mirror(root), mirror(bound), mirror(me), mirror(ingress)
    to_me = (me - root) % RING_SIZE
    to_bound = (bound - me) % RING_SIZE
    # A bound at us only stops the copy here (nothing lies strictly inside (us, us)): harmless, allowed.
    return (ingress - root) % RING_SIZE < to_me and to_bound <= RING_SIZE - to_me


def _detours_its_root(sw: BoundedFloodSwitch, h: frb.FrbHeader, ingress: int, now: float) -> bool:
    """Whether a flood rooted at a peer of ours comes by another peer though the root's end of our link stands.

    A root hands its flood, both ways round, to every peer it has itself (flooding_bounds: each arc it hands
    out starts at one of its neighbours, and no arc holds another's start), so a copy of it comes to a peer
    of the root by the root's own link, never another way. A member forging a copy under a root behind it
    could otherwise pass it on from the node past it, by the port the root's real floods take further on,
    and its invented MACs would count in the root's group there (review21f F6). The root's end stands once
    its leaf announcement came on the link (it sends one when its port comes); the rule waits
    `ROOT_LINK_GRACE` longer for copies it sent the long way round before it had the link.
    """
    announced = sw._root_links.get(h.root_nid)
    return announced is not None and ingress != h.root_nid and now - announced >= ROOT_LINK_GRACE


def _contested(sw: BoundedFloodSwitch, h: frb.FrbHeader, port: int, ingress: int, now: float) -> bool:
    """Whether this copy comes by another port than the one its root's floods (of its type) came by first, while
    that one still brings them (one within a MAC's max age, and its port stands); notes the way otherwise.

    Without trust nothing tells a root's real floods from a copy a member forged under it (review21f F6
    residual): a node that is no peer of the root gets both from peers on the arc from the root, and which of them
    the root's tree runs through depends on links it does not see. But in an overlay whose links stand, each
    root's floods come to a node by one peer only; a second peer bringing them is a forger or a tree that moved.
    The way that brought them first keeps them, and a copy by another brings a MAC not known here at most at
    CONTESTED_NEW_RATE a second per port and root, CONTESTED_PORT_RATE per port (`Drop.CONTESTED_ROOT`): a forger off the root's tree can no longer fill
    the port the real floods take further on, where its MACs would count in the root's group and push out the
    root's quiet hosts. The root's own link always holds its floods' way."""
    way = (h.root_nid, h.frb_type)
    known = sw._flood_ways.get(way)
    if known is not None and known[0] != port and sw._lapsed_ways.get(way) == port:
        # The way this root's floods took until it lapsed brings them again: it takes the way back at once. A member
        # forging a copy under a quiet root now and then takes a lapsed way, and held it against the root's real
        # floods from then on (review21j J4); now it holds it only while the root stays quiet there.
        del sw._lapsed_ways[way]
        sw._flood_ways[way] = (port, now, 0.0)
        return False
    if known is None or known[0] == port or ingress == h.root_nid or now - known[1] >= sw.learning.max_age:
        if known is None and len(sw._flood_ways) >= FLOOD_WAYS:
            for stale in [w for w, (_, seen, _) in sw._flood_ways.items() if now - seen >= sw.learning.max_age]:
                del sw._flood_ways[stale]
                sw._lapsed_ways.pop(stale, None)
            if len(sw._flood_ways) >= FLOOD_WAYS:
                return False  # every root's way live: this one is not held (as before the rule), nothing grows
        if known is not None and known[0] != port:
            if ingress == h.root_nid:
                sw._lapsed_ways.pop(way, None)  # the root's own link: nothing takes the way from it
            else:
                sw._lapsed_ways[way] = known[0]  # keys are held ways': bounded by FLOOD_WAYS
        sw._flood_ways[way] = (port, now, known[2] if known is not None and known[0] == port else 0.0)
        return False
    sw._flood_ways[way] = (known[0], known[1], now)  # the held way no longer holds the root's MACs (`_keeps_its_way`)
    return True


def _keeps_its_way(
    sw: BoundedFloodSwitch, mac: str, source: LearnedMac, root: int, port: int, hops: int, now: float
) -> bool:
    """Whether a copy under `root` by `port`, no shorter than `mac`'s path, must leave `mac` (which its owner `root`
    certified, trust mode) where it is: on a port that still brings that root's floods, the way held for one of its
    flood directions (`_contested`), within a MAC's max age, no copy of that direction having come by another port
    since (review21i I4; decision 0033).

    A member on the arc from a root to us may forge copies under that root (`_plausible`) in the one direction it
    lies on, with a hop count as short as 2, and a root's quiet interface's path is confirmed for only `PATH_HOLD`:
    it took the root's certified MAC to its port. The root's floods in the other direction come by the port the MAC
    is on, and nothing the member sends comes that way, so while that way stands the MAC stays on it. When the
    root's tree really moves (a link on its path went), that direction's copies come by another port, or none come
    for the max age: the way no longer holds, and the MAC follows by the shortest-path rule as before; a port that
    goes takes its ways with it. A shorter way is `_certified_way`'s."""
    if source.port == port or source.root != root or sw.mac_owners.get(mac) != root:
        return False
    if source.hops is None or hops < source.hops:
        return False  # a shorter way waits only for its twin (`_certified_way`): holding against one made loops
    return _way_holds(sw, root, source.port, now)


def _way_holds(sw: BoundedFloodSwitch, root: int, port: int, now: float) -> bool:
    """Whether `port` is still the way held for one of `root`'s flood directions: its floods of that direction came
    by it first, one within a MAC's max age, none by another port since."""
    for kind in _FLOOD_KINDS:
        way = sw._flood_ways.get((root, kind))
        if way is not None and way[0] == port and way[2] <= way[1] and now - way[1] < sw.learning.max_age:
            return True
    return False


def _certified_way(
    sw: BoundedFloodSwitch, mac: str, source: LearnedMac, h: frb.FrbHeader, header: bytes, port: int, hops: int,
    now: float,
) -> tuple[bool, int, int | None]:
    """Where a copy of a broadcast from `mac` (known here: `source`) places it (trust mode): (stay, port, hops) for
    `LearningTable.learn`. A copy no shorter than the MAC's path: `_keeps_its_way`. A shorter one under the MAC's
    owner's root, by another port, moves it only with its twin, the same broadcast's copy of the other direction
    (broadcast_twins.py): alone it stays while the MAC's port is still one of the root's ways (review21i I4
    residual), and its twin, coming later, moves the MAC to it.

    Why: a member on one arc from the root to us may write any hop count, and a shorter way through it cannot be
    told from a chord that came up; but it can send copies of one direction only, so a broadcast the root never
    sent comes without its twin. Honest shorter ways come with one (every real broadcast reaches us both ways), so
    the shortest-path rule, which keeps forwarding loop-free, still holds for them; what is left to a member is to
    shorten the copies of the root's real broadcasts it passes on to us (decision 0033, amended)."""
    root, kind = h.root_nid, h.frb_type
    if sw.mac_owners.get(mac) != root or source.root != root:
        return False, port, hops  # not its owner's root: 0055 and `_may_speak_for` decide
    seen = sw.broadcast_twins.copy(mac, header, kind, port, now)
    if seen.pending is not None:
        pending = sw.broadcast_twins.twin_of_pending(seen, kind)
        if (pending is not None and pending[1] < hops and pending[0] in sw.ports
                and (source.hops is None or pending[1] < source.hops)):
            return False, pending[0], pending[1]  # this copy is the twin of a shorter one held: the MAC takes it
    if source.port == port or source.hops is None or hops >= source.hops:
        return _keeps_its_way(sw, mac, source, root, port, hops, now), port, hops
    if sw.broadcast_twins.twinned(seen, kind) or not _way_holds(sw, root, source.port, now):
        return False, port, hops
    sw.broadcast_twins.hold(seen, kind, port, hops)
    sw.lone_shorter_held += 1
    return True, port, None  # held without `LearningTable._stayed`: only its own twin may move the MAC to it


def _contested_new_mac(sw: BoundedFloodSwitch, port: int, root: int, now: float) -> bool:
    """A MAC new here under a contested root: within its port's budget for that root and for all, or dropped
    and counted."""
    if sw.contested_new.allow((port, root), now) and sw.contested_port.allow(port, now):
        return False
    sw._bounded(Drop.CONTESTED_ROOT, port, now, f"root={format_node_id(root)}")
    return True


def _flood_budget_key(sw: BoundedFloodSwitch, port: SwitchPort, h: frb.FrbHeader) -> tuple[int, int | None]:
    """Whose flood budget a copy spends: its ingress port's and its root's. A root that is no member of the
    overlay (as signaling knows them; before the daemon said, one with no tunnel to it and no MAC learned
    under it) spends the port's one bucket for such roots, so a member inventing roots gets no more than
    one root's share, however many MACs it made them host here (review of issue 21)."""
    root = h.root_nid
    if root in sw.peer_ports():
        known = True
    elif sw.members is not None:
        known = root in sw.members
    else:
        known = sw.learning.hosts_any(root)
    return (port.port_no, root if known else None)


def _broadcast_in(
    sw: BoundedFloodSwitch, in_port: int, ingress: int, frame: frb.FrbFrame, now: float,
    budget_key: tuple[int, int | None], held: int | None = None,
) -> list[FlowAction]:
    """`held`: the port this root's floods come by, when this copy came by another (`_contested`)."""
    h = frame.header
    inner = frame.payload
    if h.root_nid == sw.node_id:
        sw.drops[Drop.OWN_BROADCAST] += 1
        sw.broadcasts.record_own_return()
        return []
    if router_adverts.is_statement(inner):
        # A statement vouching for a router's RA (decision 0081): the switches' word to each other, never delivered
        # nor learned; passed on only when taken here, now or before (a forgery or a stale one goes no further), not at
        # all without trust.
        if sw.router_adverts is None:
            return []
        refused, released = sw.take_statement(inner, h.root_nid, in_port, now)
        return ([] if refused else _pass_statement(sw, frame, ingress, budget_key, now, held)) + released  # it goes first
    if sw.frame_filter is not None and not sw.frame_filter(in_port, inner):
        sw.drops[Drop.POLICY] += 1  # as a flow in table 0 would: not learned, delivered nor passed on
        return []
    if not sw.guard_allows(in_port, inner, h.root_nid, now):
        return []  # a router advertisement from a member not named, or an address spoofed (decision 0068)
    if _document_not_its_owners(sw, inner, h.root_nid):
        sw._bounded(Drop.DOCUMENT_NOT_ITS_OWNERS, in_port, now,
                    f"mac={frb.format_mac(inner[6:12])} root={format_node_id(h.root_nid)}")
        return []
    sw.broadcasts.record(h.root_nid, inner, ingress, h.hop_count)
    hops = _hops(sw, h, ingress)
    inner_eth = parse_ethernet(inner)
    assert inner_eth is not None  # frb.parse guarantees an inner Ethernet header
    actions: list[FlowAction] = []
    source = sw.learning.lookup(inner_eth.src, now)
    if source is not None and source.port in sw.leaf_ports():
        sw.drops[Drop.OWN_FRAME] += 1  # ours, flooded on by a node whose path ended (see the docstring)
    elif held is not None and source is None and _contested_new_mac(sw, in_port, h.root_nid, now):
        return sw._deliver_to_leaves(inner, exclude=None)  # as any flood; its MAC stays unknown, to us and past us
    else:
        if inner_eth.is_group or source is None:
            # A flooded unicast's root is not the sender's node (see below): its hops say nothing.
            stay, way, way_hops = (_certified_way(sw, inner_eth.src, source, h, inner[:frb.ETH_HEADER_LEN], in_port,
                                                  hops, now)
                                   if source is not None and sw.mac_owners else (False, in_port, hops))
            learned = sw._learn(inner_eth.src, way, h.root_nid, now, broadcast=True,
                                hops=way_hops if inner_eth.is_group else None, stay=stay)
            if learned is None:
                return []  # a broadcast "from" one of the bridge's own MACs: forged, neither delivered nor forwarded
            actions += learned
            sw._observe_neighbor(inner_eth, inner, in_port, h.root_nid, now)
        else:
            # A flooded unicast frame whose sender we know. Its root is the node that did not know
            # the way on (a transit flood), not the sender's node, and the flood may have come the
            # long way round: moving the sender here deleted working flows along its path and sent
            # the next frames to the controller and into more floods (docs/performance.md). It only
            # teaches a MAC not known yet.
            sw.unicast_floods_not_learned += 1
        target = None if inner_eth.is_group else sw.learning.lookup(inner_eth.dst, now)
        if target is not None and target.port in sw.leaf_ports():
            actions.append(PacketOut(target.port, inner))
        else:
            actions += sw._deliver_to_leaves(inner, exclude=None)
            if inner_eth.ethertype == HOST_CLAIMS_ETHERTYPE and inner[:6] == frb.BROADCAST_MAC:
                # The daemon checks it by the port it came in by (decision 0055, amended review21d): forgeries
                # a neighbour floods under a member's id then spend that port's checks, not the member's.
                sw.flooded_announcements.append(FloodedAnnouncement(inner, ingress, h.root_nid))
    return actions + _pass_on(sw, frame, ingress, budget_key, now, hops, held)


def _pass_on(sw: BoundedFloodSwitch, frame: frb.FrbFrame, ingress: int, budget_key: tuple[int, int | None],
             now: float, hops: int | None = None, held: int | None = None) -> list[FlowAction]:
    """A broadcast passed on to the peers within its bound, if the flood budget allows."""
    h = frame.header
    hops = _hops(sw, h, ingress) if hops is None else hops
    bounds = forward_bounds(sw.node_id, h.bound_nid, sw.peer_ports(), ingress=ingress)
    if not _may_pass_on(sw, bounds, hops, budget_key, now, held):
        return []
    peers = sw.peer_ports()
    actions: list[FlowAction] = []
    for peer, bound in bounds.items():
        sw.counters.frb_forwarded += 1
        wire = frb.pack(frb.broadcast(frame.payload, h.root_nid, bound, hop_count=hops + 1))
        actions.append(PacketOut(peers[peer], wire))
    return actions


def _pass_statement(sw: BoundedFloodSwitch, frame: frb.FrbFrame, ingress: int, budget_key: tuple[int, int | None],
                    now: float, held: int | None = None) -> list[FlowAction]:
    """A copy of a router's statement taken here (now or before) passed on as any flood, within the flood budget: as
    far as `RouterAdverts.to_pass` says, the first copy's bound or, once, for a wider copy, the statement's root.
    The statement passed is the one whose signature was checked here, whatever bytes this copy came with."""
    adverts = sw.router_adverts
    assert adverts is not None
    h = frame.header
    reach = (h.bound_nid - sw.node_id) % RING_SIZE  # `_plausible`: at most the root's distance (bound at us: 0)
    passing = adverts.to_pass(frame.payload, reach, (h.root_nid - sw.node_id) % RING_SIZE)
    if passing is None:
        return []
    taken, far = passing
    hops = _hops(sw, h, ingress)
    bound = (sw.node_id + far) % RING_SIZE
    bounds = forward_bounds(sw.node_id, bound, sw.peer_ports(), ingress=ingress)
    if not _may_pass_on(sw, bounds, hops, budget_key, now, held):
        return []
    adverts.passed(taken, far)
    peers = sw.peer_ports()
    actions: list[FlowAction] = []
    for peer, peer_bound in bounds.items():
        sw.counters.frb_forwarded += 1
        actions.append(PacketOut(peers[peer], frb.pack(frb.broadcast(taken.frame, h.root_nid, peer_bound, hops + 1))))
    return actions


def _document_not_its_owners(sw: BoundedFloodSwitch, inner: bytes, root: int) -> bool:
    """Whether `inner` is a broadcast of the signed documents' flood whose source MAC a member other than the flood's
    root announced. The daemon reads that flood off the bridge's own interface, which tells the sender's MAC and
    nothing of the root, and counts a HAVE as the word of the member whose claims hold that MAC; a member's
    broadcast from another member's MAC (refused learning, `NOT_ANNOUNCER`, but delivered) counted as that member's,
    and two names made every node ask for a serial nobody holds every 30 s (review21l L4, decision 0043 amended).
    The flood's frames come from a member's interface only, whose MAC it announced and which never moves, so an
    honest one always passes. A unicast is no flood: the daemon counts none as a sender's word. Behind one VLAN tag
    too (a VLAN-0 tag, which the kernel strips, or two, the guards refused before: `neighbor_guard.as_received`)."""
    kind = inner[12:14] if inner[12:14] not in _VLAN_TAGS else inner[16:18]
    if inner[:6] != frb.BROADCAST_MAC or kind != SIGNED_DOCUMENTS_ETHERTYPE.to_bytes(2, "big"):
        return False
    owner = sw.mac_owners.get(frb.format_mac(inner[6:12]))
    return owner is not None and owner != root


def _reverse_in(
    sw: BoundedFloodSwitch, in_port: int, ingress: int, frame: frb.FrbFrame, now: float,
    budget_key: tuple[int, int | None], held: int | None = None,
) -> list[FlowAction]:
    """A broadcast's header flooded counter-clockwise: learn its source by it, pass it on, deliver nothing."""
    h = frame.header
    if h.root_nid == sw.node_id:
        sw.drops[Drop.OWN_BROADCAST] += 1
        return []
    hops = _hops(sw, h, ingress)
    inner_eth = parse_ethernet(frame.payload)
    assert inner_eth is not None  # frb.parse guarantees the header
    source = sw.learning.lookup(inner_eth.src, now)
    actions: list[FlowAction] = []
    if source is not None and source.port in sw.leaf_ports():
        sw.drops[Drop.OWN_FRAME] += 1
    elif held is not None and source is None and _contested_new_mac(sw, in_port, h.root_nid, now):
        return []
    else:
        stay, way, way_hops = (_certified_way(sw, inner_eth.src, source, h, frame.payload, in_port, hops, now)
                               if source is not None and sw.mac_owners else (False, in_port, hops))
        learned = sw._learn(inner_eth.src, way, h.root_nid, now, broadcast=True, hops=way_hops, stay=stay)
        if learned is None:
            return []  # forged from one of the bridge's own MACs: not passed on either
        actions += learned
    bounds = reverse_forward_bounds(sw.node_id, h.bound_nid, sw.peer_ports(), ingress=ingress)
    if not _may_pass_on(sw, bounds, hops, budget_key, now, held):
        return actions
    peers = sw.peer_ports()
    for peer, bound in bounds.items():
        sw.reverse_forwarded += 1
        wire = frb.pack(frb.broadcast(frame.payload, h.root_nid, bound, hops + 1, frb.FrbType.BROADCAST_REVERSE))
        actions.append(PacketOut(peers[peer], wire))
    return actions


def _hops(sw: BoundedFloodSwitch, header: frb.FrbHeader, ingress: int) -> int:
    """The copy's hop count, at least 2 unless it comes from its root: a peer cannot be nearer than that."""
    if header.root_nid != ingress and header.hop_count < 2:
        sw.hop_counts_raised += 1
        return 2
    return header.hop_count


def _may_pass_on(
    sw: BoundedFloodSwitch, bounds: Mapping[int, int], hops: int, key: tuple[int, int | None], now: float,
    held: int | None = None,
) -> bool:
    """Whether a flood's copies to `bounds` may go: under the hop limit and within the flood budget (a contested
    copy's from its root's share on the `held` way, flood_shares.py)."""
    if bounds and hops >= frb.MAX_HOP_COUNT:
        sw.drops[Drop.HOP_LIMIT] += 1
        return False
    return not bounds or sw._flood_allowed(key, now, held)
