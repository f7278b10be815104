"""An in-memory fake of the signaling service (evio.signal.interface.Signaling).

``FakeSignalHub`` plays the XMPP server: accounts in groups (one group per
overlay, as with shared rosters), presence fan-out to group contacts, message
routing to full JIDs, bounces for absent recipients, and a server that can go
down and come back. ``FakeSignalClient`` is the real ``SignalEndpoint`` (the
same schema checks, peer table, transactions and drop accounting as
``SignalClient``) on top of that hub, so tests of the overlay controller and
tunnels exercise the real signaling logic without a server.

Everything is delivered with ``loop.call_soon``: never synchronously inside
the sender's call, as over a real network.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable, Mapping

from evio.clock import REAL_CLOCK, Clock
from evio.signal.endpoint import EndpointLimits, OverlayIdentity, SignalEndpoint
from evio.signal.peers import bare_jid


class FakeSignalHub:
    def __init__(self, clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock  # every client's: request deadlines and handler timeouts run on it
        self._groups: dict[str, set[str]] = {}  # group name -> bare JIDs
        self._online: dict[str, FakeSignalClient] = {}  # full JID -> client
        self._clients: list[FakeSignalClient] = []
        self.up = True
        self.delivered = 0  # payloads handed to a recipient
        self.bounced = 0
        # Loss on demand: a payload (sender, recipient) for which this says True vanishes without a
        # bounce, as a stanza lost or answered too late on a loaded server.
        self.loses: Callable[[str, str], bool] | None = None
        self.lost = 0
        # (recipient, sender) -> the sender's session ended with the relogin status (see `kick`)
        self.returning: dict[tuple[str, str], bool] = {}
        # full JID -> the sessions its directed presence reached: told when it goes, as a server does (RFC 6121)
        self._directed: dict[str, set[str]] = {}
        self.directed = 0  # directed presence stanzas delivered
        # The presence a login exchanges lost on demand: (recipient full JID, sender full JID) for which this says
        # True, the sender's presence at either one's login never reaches the recipient, as when two members sign
        # in to two nodes of an ejabberd cluster at the same moment (decision 0067). A probe still gets it.
        self.loses_presence: Callable[[str, str], bool] | None = None
        self.probes = 0  # presence probes from clients

    # ------------------------------------------------------------------ "server admin"

    def set_group(self, group: str, members: Iterable[str], push: bool = True) -> None:
        """Set the members (bare JIDs) of a group and push the change to online clients.

        `push=False` is prosody's mod_groups: online clients learn of the change only
        when their roster is loaded again (a new login, or `check_membership`).
        """
        self._groups[group] = set(members)
        if push:
            for client in list(self._online.values()):
                self._push_roster(client)

    def kick(self, full_jid: str, relogin: bool = True, status_relogin: bool = False) -> None:
        """The server ends that session (its contacts see it go unavailable); the client logs in
        again at once, or (relogin False) when `relogin` is called, as if its network were down meanwhile.
        `status_relogin`: the session says it ends to log in again (the client's membership check)."""
        client = self._online.get(full_jid)
        if client is None:
            return
        if status_relogin:
            for other in self._online.values():
                if bare_jid(other.full_jid) in client.roster_contacts:
                    self.returning[(other.full_jid, full_jid)] = True
        self._logout(client)
        client._session_down("kicked")
        if client.started and relogin:
            asyncio.get_running_loop().call_soon(self._relogin, client)

    def delete_account(self, bare: str) -> None:
        """The account is deleted on the server: it unsubscribes from its contacts (a roster push) and its
        sessions end for good."""
        for group, members in self._groups.items():
            if bare in members:
                self.set_group(group, members - {bare})
        for full_jid in [j for j in self._online if bare_jid(j) == bare]:
            client = self._online[full_jid]
            self._logout(client)
            client._session_down("account deleted")
            client.started = False  # it cannot log in any more

    def relogin(self, full_jid: str) -> None:
        client = next((c for c in self._clients if c.full_jid == full_jid), None)
        if client is not None:
            self._relogin(client)

    def _relogin(self, client: FakeSignalClient) -> None:
        if self.up and client.started and client.full_jid not in self._online:
            self._login(client)

    def client(
        self,
        jid: str,
        memberships: Mapping[str, int],
        *,
        resource: str | None = None,
        limits: EndpointLimits | None = None,
        rng: random.Random | None = None,
        identities: Mapping[str, OverlayIdentity] | None = None,
    ) -> FakeSignalClient:
        full = f"{jid}/{resource or 'evio-' + format(min(memberships.values()), '032x')}"
        client = FakeSignalClient(
            self, full, memberships, limits or EndpointLimits(), rng or random.Random(0), clock=self.clock,
            identities=identities,
        )
        self._clients.append(client)
        return client

    def stop_server(self) -> None:
        """Every session ends at once, as when the XMPP server is killed."""
        self.up = False
        self._directed.clear()
        for client in list(self._online.values()):
            del self._online[client.full_jid]
            client._session_down("server went away")

    def start_server(self) -> None:
        """The server is back: every started client logs in again."""
        self.up = True
        for client in self._clients:
            if client.started and client.full_jid not in self._online:
                self._login(client)

    def inject(self, sender: str, to: str, text: str) -> None:
        """Deliver a raw payload from any JID (members, strangers, forgers) to `to`."""
        self._route(sender, to, text, None)

    # ------------------------------------------------------------------ server behaviour

    def _overlays_of(self, client: FakeSignalClient, bare: str) -> frozenset[str]:
        return frozenset(ov for ov in client.overlays if bare in self._groups.get(client.group_of(ov), set()))

    def _contacts(self, client: FakeSignalClient) -> set[str]:
        own = bare_jid(client.full_jid)
        groups = [m for m in self._groups.values() if own in m]
        return {b for members in groups for b in members if b != own}

    def _push_roster(self, client: FakeSignalClient) -> None:
        contacts = self._contacts(client)
        client.roster_contacts = contacts  # what the server has loaded for this session (prosody caches it)
        membership = {bare: self._overlays_of(client, bare) for bare in contacts}
        client._membership_changed({b: o for b, o in membership.items() if o})

    def _login(self, client: FakeSignalClient) -> None:
        self._online[client.full_jid] = client
        self._push_roster(client)
        client._session_up(client.full_jid)
        announcement = client._presence_payload()
        contacts = self._contacts(client)
        loop = asyncio.get_running_loop()
        for other in list(self._online.values()):
            if other is client or bare_jid(other.full_jid) not in contacts:
                continue
            # Our presence to them, theirs to us (the server answers our probes).
            if not self._lost(other.full_jid, client.full_jid):
                loop.call_soon(self._presence, other, client.full_jid, announcement)
            if not self._lost(client.full_jid, other.full_jid):
                loop.call_soon(self._presence, client, other.full_jid, other._presence_payload())

    def _lost(self, recipient: str, sender: str) -> bool:
        return self.loses_presence is not None and self.loses_presence(recipient, sender)

    def _probe(self, client: FakeSignalClient, to: str) -> None:
        """A presence probe from `client` to the bare JID `to`: the presence of each of its sessions online, if it
        is in the client's roster (as a server answers one, RFC 6121 4.3)."""
        if self._online.get(client.full_jid) is not client:
            return
        self.probes += 1
        if to not in client.roster_contacts:
            return
        loop = asyncio.get_running_loop()
        for other in list(self._online.values()):
            if bare_jid(other.full_jid) == to:
                loop.call_soon(self._presence, client, other.full_jid, other._presence_payload())

    def _reannounce(self, client: FakeSignalClient) -> None:
        """A new presence of an online client (its identity element changed) goes to its contacts."""
        if self._online.get(client.full_jid) is not client:
            return
        payload = client._presence_payload()
        loop = asyncio.get_running_loop()
        for other in list(self._online.values()):
            if other is not client and bare_jid(other.full_jid) in client.roster_contacts:
                loop.call_soon(self._presence, other, client.full_jid, payload)

    def _presence(self, to: FakeSignalClient, sender: str, announcement: tuple[str, str | None, str | None] | None,
                  answer: bool = False) -> None:  # fmt: skip
        if self._online.get(to.full_jid) is not to:
            return
        if announcement is None:
            to._presence_unavailable(sender, returning=self.returning.pop((to.full_jid, sender), False))
        else:
            to._presence_available(sender, announcement[0], announcement[1], answer=answer, members_json=announcement[2])

    def _direct(self, client: FakeSignalClient, to: str, answer: bool) -> None:
        """Presence from `client` to `to` alone: a full JID's session, or every session of a bare JID."""
        if self._online.get(client.full_jid) is not client:
            return
        targets = [c for j, c in self._online.items() if j == to or ("/" not in to and bare_jid(j) == to)]
        payload = client._presence_payload()
        loop = asyncio.get_running_loop()
        for target in targets:
            if target is client:
                continue
            self._directed.setdefault(client.full_jid, set()).add(target.full_jid)
            self.directed += 1
            loop.call_soon(self._presence, target, client.full_jid, payload, answer)

    def _logout(self, client: FakeSignalClient) -> None:
        if self._online.get(client.full_jid) is not client:
            return
        del self._online[client.full_jid]
        contacts = client.roster_contacts  # the session's roster, not the groups as they are now
        told = self._directed.pop(client.full_jid, set())
        loop = asyncio.get_running_loop()
        for other in list(self._online.values()):
            if bare_jid(other.full_jid) in contacts or other.full_jid in told:
                loop.call_soon(self._presence, other, client.full_jid, None)

    def _route(self, sender: str, to: str, text: str, msg_id: str | None, members: bool = False) -> None:
        loop = asyncio.get_running_loop()
        target = self._online.get(to)
        if target is None:  # like a server: a full JID that is gone falls back to another session
            target = next((c for j, c in self._online.items() if bare_jid(j) == bare_jid(to)), None)
        if target is None:
            self.bounced += 1
            origin = self._online.get(sender)
            if origin is not None and msg_id is not None:
                loop.call_soon(origin._bounced, msg_id, to, "service-unavailable")
            return
        if self.loses is not None and self.loses(sender, to):
            self.lost += 1
            return
        self.delivered += 1
        loop.call_soon(self._deliver, target, sender, text, members)

    def _deliver(self, target: FakeSignalClient, sender: str, text: str, members: bool = False) -> None:
        if self._online.get(target.full_jid) is target:
            if members:  # a member list message (<members/>, decision 0063)
                target._members_message(sender, text)
            else:
                target._payload_received(sender, text)


class FakeSignalClient(SignalEndpoint):
    """A signaling client whose server is a FakeSignalHub."""

    def __init__(
        self,
        hub: FakeSignalHub,
        full_jid: str,
        memberships: Mapping[str, int],
        limits: EndpointLimits,
        rng: random.Random,
        groups: Mapping[str, str] | None = None,
        clock: Clock = REAL_CLOCK,
        identities: Mapping[str, OverlayIdentity] | None = None,
    ) -> None:
        super().__init__(bare_jid(full_jid), memberships, limits, rng, clock, identities)
        self._hub = hub
        self.full_jid = full_jid
        self._groups_by_overlay = dict(groups or {})
        self.started = False
        self.membership_checks = 0
        self.roster_contacts: set[str] = set()

    def group_of(self, overlay: str) -> str:
        return self._groups_by_overlay.get(overlay, overlay)

    async def start(self) -> None:
        if self.started:
            raise RuntimeError("already started")
        self.started = True
        if self._hub.up:
            self._hub._login(self)

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        self._hub._logout(self)
        self._session_down("stopped")
        await self._stop_endpoint()

    def _presence_payload(self) -> tuple[str, str | None, str | None]:
        """What our presence carries: the announce document, the identity element (trust mode) and the serials
        of the member lists we hold (decision 0063)."""
        return self._announcement(), self._identity_document(self.full_jid), self._members_hint()

    def _announce_again(self) -> None:
        self._hub._reannounce(self)
        self._tell_links_again()

    def _send_directed(self, to: str, answer: bool) -> None:
        self._hub._direct(self, to, answer)

    def _send_probe(self, to: str) -> None:
        self._hub._probe(self, to)

    def _transmit(self, to: str, text: str, msg_id: str | None) -> None:
        self._hub._route(self.full_jid, to, text, msg_id)

    def _send_members(self, to: str, text: str) -> None:
        self._hub._route(self.full_jid, to, text, None, members=True)

    def _refresh_membership(self) -> None:
        self.membership_checks += 1
        if self._hub._online.get(self.full_jid) is self:
            self._hub._push_roster(self)
