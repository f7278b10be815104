"""The link to each peer, as this node sees it, and the steps that change it, each returning its actions.

One `PeerLink` per peer this node has, or negotiates, a link with; `PeerLinks` owns them all (the one
picture of our links: the orchestrator, `answers` and `evaluation` ask it). Links are held per end, as in
`evio.overlay.adjacency`: this node *holds* a link (`held`, its own type) and knows whether the peer holds
it (`theirs`). A tunnel exists while either end holds it. The steps, in the order a link lives:

1. `ask`: send an ``overlay.link`` request (a new link, or ``existing`` to take over or retype one);
2. `connect`: the peer accepted our new link; `AWAITING` is the answerer's side, waiting for our tunnel;
3. `announce_up`: the tunnel is up and someone holds the link: `LinkUp` for subscribers;
4. `let_go` / `withdraw` / `send_release`: this end no longer holds the link (``overlay.release``);
5. `close_if_unheld` / `disconnect`: nobody holds it any more: the tunnel is closed;
6. `end_tunnel`: the tunnel is gone, and with it the link for both ends (`LinkDown`).

Pure: no clock (every step takes `now`), no I/O; the actions go to `evio.overlay.controller`.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import ItemsView, Iterable, KeysView
from dataclasses import dataclass

from evio.overlay.actions import Action, Connect, Disconnect, Failure, Notify, SendLinkRequest, SendRelease
from evio.overlay.adjacency import Adjacency, Link, LinkState, LinkType
from evio.overlay.adjacency_events import LinkDown, LinkInfo, LinkUp
from evio.overlay.negotiation import LinkRequest, ReleaseAnswer, ReleaseRequest

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    """Where the tunnel to a peer is, as this node sees it."""

    NONE = "none"
    AWAITING = "awaiting"  # we accepted the peer's request: it connects, we wait for the tunnel
    CONNECTING = "connecting"  # our request was accepted: we called connect
    UP = "up"
    CLOSING = "closing"  # we called disconnect


@dataclass(slots=True)
class PeerLink:
    """Everything this node tracks about one peer it has, or is negotiating, a link with."""

    held: LinkType | None = None  # our hold
    theirs: LinkType | None = None  # the peer's hold, as far as we know
    asking: LinkType | None = None  # our overlay.link in flight (or awaiting the winner after a collision)
    asking_existing: bool = False
    asking_seq: int = 0
    collision_until: float | None = None
    releasing_seq: int | None = None  # our overlay.release in flight ...
    releasing_type: LinkType | None = None  # ... of a link we held as this
    release_due: LinkType | None = None  # a release (of a link held as this) to send once signaling is back
    phase: Phase = Phase.NONE
    connect_seq: int = 0
    deadline: float | None = None  # AWAITING: give up; UP with no holder: close
    tunnel_id: str | None = None
    last_down_id: str | None = None  # a late report about this tunnel is ignored
    epoch: int | None = None  # the peer's epoch in its last request or acceptance
    tap: str | None = None
    since: float = 0.0
    announced: bool = False  # LinkUp sent for the current tunnel
    released_by_peer: bool = False  # the peer let go: its tunnel going down is no failure

    def holder_type(self) -> LinkType | None:
        return self.held or self.theirs

    def busy(self) -> bool:
        return self.asking is not None or self.releasing_seq is not None

    def idle(self) -> bool:
        return (
            self.held is None
            and self.theirs is None
            and not self.busy()
            and self.release_due is None
            and self.phase is Phase.NONE
        )

    def link_state(self) -> LinkState:
        if self.phase is Phase.UP:
            return LinkState.UP
        if self.phase is Phase.CLOSING:
            return LinkState.CLOSING
        return LinkState.PENDING

    def reports_current(self, tunnel_id: str | None) -> bool:
        """A tunnel event about `tunnel_id` is about our current tunnel (None: whichever it is)."""
        return tunnel_id is None or (
            tunnel_id != self.last_down_id and (self.tunnel_id is None or tunnel_id == self.tunnel_id)
        )

    def set_phase(self, phase: Phase, now: float) -> None:
        if self.phase is not phase:
            self.phase = phase
            self.since = now


class PeerLinks:
    """The links of one overlay, per peer; `seq` numbers our requests and connects for their answers."""

    def __init__(self, name: str = "") -> None:
        self.name = name  # the overlay id, for logs
        self._peers: dict[int, PeerLink] = {}
        self._seq = 0
        self.requests_sent = 0

    # -- the table ---------------------------------------------------------------------------------

    def get(self, peer: int) -> PeerLink | None:
        return self._peers.get(peer)

    def track(self, peer: int) -> PeerLink:
        """The peer's record, made if it has none."""
        st = self._peers.get(peer)
        if st is None:
            st = self._peers[peer] = PeerLink()
        return st

    def items(self) -> ItemsView[int, PeerLink]:
        return self._peers.items()

    def peers(self) -> KeysView[int]:
        return self._peers.keys()

    def forget_if_idle(self, peer: int) -> None:
        st = self._peers.get(peer)
        if st is not None and st.idle() and st.collision_until is None:
            del self._peers[peer]

    def clear(self) -> None:
        self._peers.clear()

    # -- views ---------------------------------------------------------------------------------------

    def phase(self, peer: int) -> Phase:
        st = self._peers.get(peer)
        return Phase.NONE if st is None else st.phase

    def view(self) -> Adjacency:
        """Our links as `diff` and `accept_request` see them (our in-flight requests as pending holds)."""
        outgoing: dict[int, Link] = {}
        incoming: dict[int, Link] = {}
        for peer, st in self._peers.items():
            mine = st.held or st.asking
            if mine is not None:
                outgoing[peer] = Link(mine, st.link_state())
            if st.theirs is not None:
                incoming[peer] = Link(st.theirs, st.link_state())
        return Adjacency(outgoing, incoming)

    def adjacency(self) -> dict[int, LinkInfo]:
        out: dict[int, LinkInfo] = {}
        for peer, st in self._peers.items():
            link_type = st.holder_type()
            if link_type is None:
                continue
            tap = st.tap if st.phase in (Phase.UP, Phase.CLOSING) else None
            out[peer] = LinkInfo(peer, link_type, st.link_state(), tap, st.since)
        return out

    def tunnel_count(self) -> int:
        """Tunnels this node has or is setting up or awaiting (what `limits.max_tunnels` caps)."""
        return sum(1 for st in self._peers.values() if st.phase is not Phase.NONE)

    def expects_tunnel(self, peer: int) -> bool:
        st = self._peers.get(peer)
        return st is not None and st.phase in (Phase.AWAITING, Phase.CONNECTING, Phase.UP) and (
            st.holder_type() is not None or st.busy()
        )

    def up_and_held(self) -> set[int]:
        """Peers whose link is up: a live tunnel proves the peer runs even if its signaling session dropped."""
        return {p for p, st in self._peers.items() if st.phase is Phase.UP and st.holder_type() is not None}

    def held_or_asked(self, link_type: LinkType) -> list[int]:
        return [p for p, st in self._peers.items() if (st.held or st.asking) is link_type]

    def asking_new(self) -> int:
        return sum(1 for st in self._peers.values() if st.asking is not None and st.phase is Phase.NONE)

    def setting_up(self, successors: bool) -> int:
        """Our own new links under way, successor links or the others: asked for, or accepted and connecting."""
        count = 0
        kind: LinkType | None
        for st in self._peers.values():
            if st.asking is not None and not st.asking_existing and st.phase is Phase.NONE:
                kind = st.asking
            elif st.phase is Phase.CONNECTING:
                kind = st.held or st.asking
            else:
                continue
            count += (kind is LinkType.SUCCESSOR) is successors
        return count

    def deadlines(self) -> Iterable[float]:
        for st in self._peers.values():
            yield from (t for t in (st.deadline, st.collision_until) if t is not None)

    # -- steps ---------------------------------------------------------------------------------------

    def ask(self, peer: int, st: PeerLink, request: LinkRequest) -> list[Action]:
        self._seq += 1
        st.asking, st.asking_existing, st.asking_seq = request.type, request.existing, self._seq
        st.collision_until = None
        self.requests_sent += 1
        log.log(
            logging.DEBUG if request.existing else logging.INFO,
            "overlay %s asking peer=%032x for a %s link%s",
            self.name, peer, request.type.value, " (existing)" if request.existing else "",
        )
        return [SendLinkRequest(peer, self._seq, request)]

    def connect(self, peer: int, st: PeerLink, now: float) -> list[Action]:
        self._seq += 1
        st.connect_seq = self._seq
        st.deadline = None
        st.set_phase(Phase.CONNECTING, now)
        return [Connect(peer, self._seq)]

    def tunnel_up(self, peer: int, tunnel_id: str, tap: str, now: float) -> list[Action] | None:
        """The tunnel to `peer` is up (a new one replaces the old); None if it was known already."""
        st = self.track(peer)
        if st.tunnel_id == tunnel_id or tunnel_id == st.last_down_id:
            return None
        out: list[Action] = []
        if st.tunnel_id is not None:
            out += self.announce_down(peer, st, "replaced by a new tunnel")
        st.tunnel_id, st.tap = tunnel_id, tap
        st.released_by_peer = False
        st.set_phase(Phase.UP, now)
        return out + self.announce_up(peer, st)

    def announce_up(self, peer: int, st: PeerLink) -> list[Action]:
        link_type = st.holder_type()
        if st.phase is Phase.UP and not st.announced and link_type is not None:
            st.announced = True
            return [Notify(LinkUp(peer, link_type, st.tap or ""))]
        return []

    def announce_down(self, peer: int, st: PeerLink, reason: str) -> list[Action]:
        if st.announced:
            st.announced = False
            return [Notify(LinkDown(peer, st.tap or "", reason))]
        return []

    def let_go(self, peer: int, st: PeerLink, now: float, member: bool, connected: bool) -> list[Action]:
        """Stop holding the link; the tunnel goes once the peer does not hold it either.

        `member`: the peer is present in signaling; `connected`: so are we (a release can be sent)."""
        held = st.held
        st.held = None
        if held is None:
            return []
        if member and connected:
            return self.send_release(peer, st, held)
        if not connected and st.phase is not Phase.NONE:
            st.release_due = held
            return []
        return self.close_if_unheld(peer, st, now)

    def withdraw(self, peer: int, st: PeerLink, link_type: LinkType, member: bool, connected: bool) -> list[Action]:
        """A new link we asked for will not be made now: say so, in case the peer agreed and waits for it."""
        if member and connected and st.releasing_seq is None:
            return self.send_release(peer, st, link_type)
        return []

    def send_release(self, peer: int, st: PeerLink, held: LinkType) -> list[Action]:
        self._seq += 1
        st.releasing_seq, st.releasing_type = self._seq, held
        return [SendRelease(peer, self._seq, ReleaseRequest(held))]

    def close_if_unheld(self, peer: int, st: PeerLink, now: float) -> list[Action]:
        if st.held is not None or st.theirs is not None or st.asking is not None:
            return []
        if st.phase is Phase.AWAITING:
            st.set_phase(Phase.NONE, now)
        elif st.phase in (Phase.UP, Phase.CONNECTING):
            return self.disconnect(peer, st, now)
        return []

    def release_unsent(self, st: PeerLink) -> None:
        """Our release could not be sent (our signaling is down): say it again once signaling is back."""
        st.releasing_seq = None
        released_type, st.releasing_type = st.releasing_type, None
        if st.held is None:
            st.release_due = released_type  # the tunnel stays meanwhile

    def release_answered(self, peer: int, st: PeerLink, outcome: ReleaseAnswer | Failure, now: float) -> list[Action]:
        """The peer answered our release with its own hold (or could not: then it needs none)."""
        st.releasing_seq = st.releasing_type = None
        st.theirs = outcome.held_as if isinstance(outcome, ReleaseAnswer) else None
        return self.close_if_unheld(peer, st, now)

    def peer_left(self, peer: int, st: PeerLink, revoked: bool, now: float) -> list[Action]:
        """The peer left signaling: our requests to it are over; its link ends if `revoked` or not up yet
        (an up link stays while its tunnel lives)."""
        if st.asking is not None:
            st.asking, st.collision_until = None, None
        st.release_due = None
        if revoked or st.phase is not Phase.UP:
            # Revoked: no link may stay. Not up yet: it will not come up without the peer.
            st.held = st.theirs = None
            if st.phase is Phase.AWAITING:
                st.set_phase(Phase.NONE, now)
            elif st.phase in (Phase.UP, Phase.CONNECTING):
                return self.disconnect(peer, st, now)
        return []

    def disconnect(self, peer: int, st: PeerLink, now: float) -> list[Action]:
        st.deadline = None
        st.set_phase(Phase.CLOSING, now)
        return [Disconnect(peer)]

    def end_tunnel(self, peer: int, st: PeerLink, reason: str, now: float) -> list[Action]:
        """The tunnel is gone: so is the link, for both ends."""
        out = self.announce_down(peer, st, reason)
        st.held = st.theirs = None
        st.last_down_id = st.tunnel_id or st.last_down_id
        st.tunnel_id = st.tap = None
        st.deadline = None
        st.released_by_peer = False
        st.set_phase(Phase.NONE, now)
        return out

    def expire(self, now: float, members: set[int], connected: bool, orphan_grace: float) -> list[Action]:
        """Deadlines that passed: a collision's winner that never asked, a requester that never connected,
        a tunnel nobody holds (after `orphan_grace`), a release owed since signaling came back."""
        out: list[Action] = []
        for peer, st in list(self._peers.items()):
            if st.collision_until is not None and st.collision_until <= now:
                st.asking, st.collision_until = None, None  # the winner's request never came
            if st.phase is Phase.AWAITING and st.deadline is not None and st.deadline <= now:
                log.info("overlay %s peer=%032x never connected the link we accepted", self.name, peer)
                st.held = st.theirs = None
                st.set_phase(Phase.NONE, now)
            elif st.phase is Phase.UP and (st.holder_type() is not None or st.busy()):
                st.deadline = None
            elif st.phase is Phase.UP:
                # A tunnel nobody holds (a release that crossed a request, a peer that restarted): close it.
                if st.deadline is None:
                    st.deadline = now + orphan_grace
                elif st.deadline <= now:
                    log.info("overlay %s closing unheld tunnel to peer=%032x", self.name, peer)
                    out += self.disconnect(peer, st, now)
            if st.release_due is not None and connected and st.releasing_seq is None:
                released, st.release_due = st.release_due, None
                if st.held is not None:
                    pass  # held again meanwhile: nothing to release
                elif peer in members:
                    out += self.send_release(peer, st, released)
                else:
                    out += self.close_if_unheld(peer, st, now)
            self.forget_if_idle(peer)
        return out

    def stop(self, members: set[int], connected: bool, now: float) -> list[Action]:
        """Releases for every link we hold, then a disconnect for every tunnel: the node leaves."""
        out: list[Action] = []
        for peer, st in self._peers.items():
            if st.held is not None and peer in members and connected:
                self._seq += 1
                out.append(SendRelease(peer, self._seq, ReleaseRequest(st.held)))
            st.held = st.theirs = st.asking = None
            st.releasing_seq = st.releasing_type = None
        for peer, st in self._peers.items():
            if st.phase is not Phase.NONE:
                out += self.disconnect(peer, st, now)
        return out

    def close(self, reason: str) -> list[Action]:
        """Report what is still announced, and forget every link."""
        out: list[Action] = []
        for peer, st in self._peers.items():
            out += self.announce_down(peer, st, reason)
        self._peers.clear()
        return out
