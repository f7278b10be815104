"""`Node`: the daemon's parts for every overlay, started in order and stopped in reverse.

Start: the local control API (its socket doubles as the lock against a
second daemon on the same state dir); the SDN controller (os-ken thread)
until it accepts switches; per overlay the bridge, its attachment to the
controller, the tunnel manager and the overlay controller; then the
signaling accounts log in; then the address announcer. `run()` then waits for `stop()` (the
signal handlers call it) or for a part that must not die (the SDN
controller) to die, and tears everything down: links released, tunnels
closed, ports removed, bridges deleted, accounts logged out.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evio.bridge.commands import BridgeError
from evio.clock import REAL_CLOCK, Clock
from evio.ids import format_node_id, parse_node_id
from evio.node import ring_signaling
from evio.node.control import ControlError, ControlServer
from evio.node.errors import StartupError
from evio.node.overlay_stack import OverlayStack
from evio.node.overlay_status import attached_ports_status, overlay_status
from evio.node.plain_loop_thread import PlainLoopThread
from evio.node.plan import AccountPlan, NodePlan, OverlayPlan
from evio.node.platform import AddressAnnouncer, Platform
from evio.node.reload import ReloadPlan, ReloadRefused, plan_reload
from evio.node.sdn import SdnController
from evio.node.signal_mux import SharedAccount
from evio.node.status import STATUS_VERSION
from evio.node.systemd import Notifier
from evio.node.thread_names import name_os_threads
from evio.sdn.boundary import SwitchConnected
from evio.signal.endpoint import SignalEndpoint
from evio.signal.interface import Signaling
from evio.tunnel.path import aioice_patches

if TYPE_CHECKING:  # prometheus_client (some 2 MB resident) is imported only where metrics are on
    from evio.node.metrics import MetricsServer

log = logging.getLogger(__name__)

INTERFACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")  # the config schema's bridgeName
STATUS_INTERVAL = 5.0  # seconds between STATUS= updates to systemd (sent only when the line changed)


class Node:
    def __init__(
        self,
        plan: NodePlan,
        platform: Platform,
        control_socket: Path | None = None,
        clock: Clock = REAL_CLOCK,
        freeze_startup_objects: bool = True,
        notifier: Notifier | None = None,
    ) -> None:
        self.plan = plan
        self._platform = platform
        self._control_socket = control_socket
        self._clock = clock
        self._freeze = freeze_startup_objects  # process-wide (the collector's): off where nodes share a process
        self.sdn: SdnController | None = None
        self.accounts: dict[str, Signaling] = {}
        self.overlays: dict[str, OverlayStack] = {}
        self._control: ControlServer | None = None
        self.metrics: MetricsServer | None = None
        self._announcer: PlainLoopThread | None = None
        self._garp: AddressAnnouncer | None = None  # what runs in _announcer
        self._tasks: list[asyncio.Task[Any]] = []
        self._stop_requested = asyncio.Event()
        self._fatal: str | None = None
        self._started_at: float | None = None
        self.ready = asyncio.Event()  # set once every part is up
        self._notifier = notifier
        self.notified_ready = False  # READY=1 went to systemd (every account logged in)
        self._shared: dict[str, SharedAccount] = {}
        self._reload_lock = asyncio.Lock()
        self.reloads = 0

    @property
    def node_id(self) -> int:
        return self.plan.node_id

    def stop(self) -> None:
        """Ask `run()` to tear down and return (safe from a signal handler)."""
        self._stop_requested.set()

    async def run(self) -> str | None:
        """Start, serve until `stop()`, tear down. Returns None on a requested stop, else why it had to stop."""
        try:
            await self.start()
        except BaseException:
            await self.shutdown()
            raise
        try:
            await self._stop_requested.wait()
        finally:
            await self.shutdown()
        return self._fatal

    async def start(self) -> None:
        started = self._clock.now()
        if self._control_socket is not None:
            # First: its socket is also the lock that keeps a second daemon with this state dir
            # from touching the bridges of the first.
            control = ControlServer(self._control_socket, {"status": self.status},
                                    {"probe": self.probe, "attach": self.attach, "detach": self.detach})
            await control.start()
            self._control = control
        await self._start_metrics(self.plan.metrics_listen)
        self.sdn = self._platform.sdn_controller()
        await self.sdn.start()
        self._watch(self._sdn_events(self.sdn), "sdn events")
        self._watch(self._sdn_alive(self.sdn), "sdn watch")
        for account in self.plan.accounts:
            self._add_account(account)
        for overlay_plan in self.plan.overlays:
            await self._start_overlay(overlay_plan)
        for jid in list(self.accounts):
            await self._start_account(jid)
        self._start_announcer()
        self._started_at = self._clock.now()
        # What startup made (some 130 000 objects: modules, os-ken's parsers, config) lives as long
        # as the process. Frozen, it is out of the collector's full passes, which otherwise take
        # 40-60 ms here and stall every tunnel's data path on this loop meanwhile.
        if self._freeze:
            gc.collect()
            gc.freeze()
            _return_free_heap()
        name_os_threads()
        self.ready.set()
        log.info("node %s up: %d overlay(s) in %.2f s", format_node_id(self.node_id), len(self.overlays),
                 self._clock.now() - started)
        self._watch(self._systemd(), "systemd notifications", fatal=False)

    # -- parts, started and stopped one by one (start, and a reload) ------------------------------

    async def _start_metrics(self, listen: tuple[str, int] | None) -> None:
        if listen is None:
            return
        host, port = listen
        from evio.node.metrics import MetricsServer

        metrics = MetricsServer(host, port, self.status)
        try:
            await metrics.start()
        except OSError as exc:
            raise StartupError(f"metrics endpoint {host}:{port}: {exc.strerror or exc}") from exc
        self.metrics = metrics

    def _add_account(self, account: AccountPlan) -> None:
        client = self._platform.signal_client(account.settings)
        self.accounts[account.jid] = client
        self._shared[account.jid] = SharedAccount(client)

    async def _start_account(self, jid: str) -> None:
        try:
            await self.accounts[jid].start()
        except Exception as exc:
            raise StartupError(f"signaling account {jid}: {type(exc).__name__}: {exc}") from exc

    async def _stop_account(self, jid: str) -> None:
        client = self.accounts.pop(jid, None)
        self._shared.pop(jid, None)
        if client is not None:
            try:
                await client.stop()
            except Exception:
                log.exception("signaling account %s did not stop cleanly", jid)

    async def _start_overlay(self, overlay_plan: OverlayPlan) -> None:
        assert self.sdn is not None
        signaling: Signaling = self._shared[overlay_plan.account].view(overlay_plan.id)
        # Trust mode: link requests and offers go along the ring once we have links (decision 0064).
        ring = ring_signaling.for_overlay(overlay_plan, self.node_id, signaling, self._clock)
        client = self._shared[overlay_plan.account].client
        if ring is not None and isinstance(client, SignalEndpoint):  # every member's key, proven in its presence
            ring.use_keys(functools.partial(client.certificate_key, overlay_plan.id))
        signaling = ring or signaling
        stack = OverlayStack(
            overlay_plan,
            self.node_id,
            signaling,
            self._platform.bridge(overlay_plan),
            self.sdn,
            make_links=lambda on_event, p=overlay_plan, s=signaling: self._platform.links(  # type: ignore[misc]
                p, self.node_id, s, on_event
            ),
            make_controller=lambda links, p=overlay_plan, s=signaling: self._platform.overlay_controller(  # type: ignore[misc]
                p, self.node_id, s, links
            ),
            clock=self._clock,
            on_first_port=self._first_tunnel_port,
        )
        if ring is not None:
            ring.attach(stack.links)
        self.overlays[overlay_plan.id] = stack
        try:
            await stack.start()
        except Exception as exc:
            raise StartupError(f"overlay {overlay_plan.id}: {type(exc).__name__}: {exc}") from exc

    async def _stop_overlay(self, overlay: str) -> None:
        stack = self.overlays.pop(overlay, None)
        if stack is not None:
            await stack.stop()
            shared = self._shared.get(stack.plan.account)
            if shared is not None:
                shared.forget(overlay)

    def _start_announcer(self) -> None:
        announcer = self._platform.address_announcer({stack.bridge.name for stack in self.overlays.values()})
        if announcer is not None:
            # Its netlink watch cannot run on uvloop: it gets a thread and a plain loop of its own.
            self._garp = announcer
            self._announcer = PlainLoopThread("evio-garp", announcer.run)
            self._announcer.start()

    def _first_tunnel_port(self, bridge: str) -> None:
        # The gratuitous ARPs sent while the bridge had no tunnel reached nobody (docs/design.md, "Address relocation").
        if self._garp is not None:
            self._garp.announce_again(bridge)

    async def _stop_announcer(self) -> None:
        if self._announcer is not None:
            self._garp = None
            await asyncio.to_thread(self._announcer.stop)
            self._announcer = None

    # -- reload (SIGHUP) ---------------------------------------------------------------------------

    async def reload(self, new_plan: NodePlan) -> ReloadPlan:
        """Apply a new config's plan; overlays it does not concern keep running untouched.

        Raises ReloadRefused (nothing changed) when it cannot be applied. One reload at a time.
        """
        async with self._reload_lock:
            if not self.ready.is_set():
                raise ReloadRefused("the node is not up")
            change = plan_reload(self.plan, new_plan)
            if self._notifier is not None:
                self._notifier.reloading()
            log.info("reload: %s", change.summary())
            try:
                if change.changes_nothing:
                    self.plan = change.plan
                else:
                    await self._apply_reload(change)
                for overlay, stack in self.overlays.items():
                    if overlay not in change.attach and stack.attach_retry_wanted():
                        await stack.set_attached(stack.plan.config.attach)  # a refused one may be there now
            finally:
                if self._notifier is not None:
                    self._notifier.ready(self.status_line())
            self.reloads += 1
            return change

    async def _apply_reload(self, change: ReloadPlan) -> None:
        for overlay in (*change.removed, *change.restarted):
            await self._stop_overlay(overlay)
        for jid in change.accounts_stopped:
            await self._stop_account(jid)
        for overlay, topology in change.topology.items():
            self.overlays[overlay].set_topology(topology)
        for overlay, settings in change.tunnel.items():
            self.overlays[overlay].set_tunnel_settings(settings)
        for overlay, names in change.attach.items():
            await self.overlays[overlay].set_attached(names)
        for overlay, rules in change.policy.items():
            self.overlays[overlay].set_policy(rules)
        for jid, servers in change.servers.items():
            self.accounts[jid].use_servers(servers)
        self.plan = change.plan
        for account in change.plan.accounts:
            if account.jid in change.accounts_started:
                self._add_account(account)
        for overlay_plan in change.plan.overlays:
            if overlay_plan.id in change.added or overlay_plan.id in change.restarted:
                await self._start_overlay(overlay_plan)
        for jid in change.accounts_started:
            await self._start_account(jid)
        # Overlays kept their place in the dict; new ones went to the end. Keep the config's order.
        self.overlays = {p.id: self.overlays[p.id] for p in change.plan.overlays if p.id in self.overlays}
        if change.added or change.removed or change.restarted:
            await self._stop_announcer()
            self._start_announcer()
        if change.metrics_changed:
            if self.metrics is not None:
                await self.metrics.stop()
                self.metrics = None
            await self._start_metrics(change.plan.metrics_listen)

    # -- systemd ------------------------------------------------------------------------------------

    def status_line(self) -> str:
        """One line for systemd's STATUS=: links up per overlay and signaling."""
        parts = []
        for name, stack in self.overlays.items():
            up = [info for info in stack.controller.adjacency().values() if getattr(info, "state", None) is not None
                  and getattr(info.state, "value", None) == "up"]
            signal = "signaling up" if stack.signaling.connected else "signaling DOWN"
            parts.append(f"{name}: {len(up)} links up, {signal}")
        return "; ".join(parts) or "no overlays"

    async def _systemd(self) -> None:
        """READY=1 once every account is logged in; WATCHDOG=1 (from the start) and STATUS= from this loop."""
        notifier = self._notifier
        if notifier is None or not notifier.enabled:
            return
        interval = min(notifier.watchdog_interval or STATUS_INTERVAL, STATUS_INTERVAL)
        logins = asyncio.ensure_future(asyncio.gather(*(client.wait_connected() for client in self.accounts.values())))
        try:
            while True:
                if notifier.watchdog_interval is not None:
                    notifier.watchdog()  # also while logging in: the loop is alive, only the server is slow
                if not self.notified_ready:
                    await asyncio.wait({logins}, timeout=interval)
                    if logins.done():
                        notifier.ready(self.status_line())
                        self.notified_ready = True
                        log.info("told systemd: ready")
                        continue
                else:
                    notifier.status(self.status_line())
                    await asyncio.sleep(interval)
        finally:
            logins.cancel()

    async def shutdown(self) -> None:
        """Undo whatever `start` did, in reverse order; every step runs even if one before it failed."""
        self.ready.clear()
        if self._notifier is not None:
            self._notifier.stopping()
        if self._control is not None:
            await self._control.stop()
            self._control = None
        if self.metrics is not None:
            await self.metrics.stop()
            self.metrics = None
        await self._stop_announcer()
        for overlay in reversed(list(self.overlays)):
            await self._stop_overlay(overlay)
        for jid in list(self.accounts):
            await self._stop_account(jid)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._freeze:
            gc.unfreeze()  # what start froze may now be garbage
        log.info("node %s stopped", format_node_id(self.node_id))

    # -- supervised tasks ------------------------------------------------------------------------

    def _watch(self, coro: Any, what: str, fatal: bool = True) -> None:
        task = asyncio.create_task(coro, name=what)

        def done(t: asyncio.Task[Any]) -> None:
            if t.cancelled():
                return
            error = t.exception()
            if error is not None:
                log.error("%s failed", what, exc_info=error)
                if fatal:
                    self._fail(f"{what} failed: {error!r}")

        task.add_done_callback(done)
        self._tasks.append(task)

    def _fail(self, reason: str) -> None:
        if self._fatal is None:
            self._fatal = reason
            log.error("node stopping: %s", reason)
        self._stop_requested.set()

    async def _sdn_alive(self, sdn: SdnController) -> None:
        self._fail(await sdn.wait_stopped())

    async def _sdn_events(self, sdn: SdnController) -> None:
        while True:
            event = await sdn.next_event()
            if isinstance(event, SwitchConnected):
                name_os_threads()  # os-ken started the connection's threads
            stack = self.overlays.get(event.overlay)
            if stack is not None:
                try:
                    stack.controller_event(event)
                except Exception:
                    log.exception("handling %s failed", event)

    # -- control requests --------------------------------------------------------------------------

    async def probe(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """`evio ping`: {"overlay": ID (optional with one overlay), "peer": 32 hex digits, "timeout": s}."""
        overlay = request.get("overlay")
        if overlay is None and len(self.overlays) == 1:
            overlay = next(iter(self.overlays))
        stack = self.overlays.get(overlay) if isinstance(overlay, str) else None
        if stack is None:
            raise ControlError(f"no overlay {overlay!r} on this node (overlays: {', '.join(self.overlays) or 'none'})")
        try:
            peer = parse_node_id(str(request.get("peer", "")))
        except ValueError as exc:
            raise ControlError(f"bad peer: {exc}") from None
        timeout = request.get("timeout", 2.0)
        if not isinstance(timeout, int | float) or not 0 < timeout <= 10:
            raise ControlError("timeout must be a number of seconds in (0, 10]")
        return await stack.probe(peer, float(timeout))


    async def attach(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """`evio attach`: {"overlay": ID, "interface": NAME} -> the port as the status shows it."""
        stack, name = self._attach_target(request)
        try:
            await stack.attach(name)
        except BridgeError as exc:  # AttachRefused among them: one line that says why, nothing changed
            raise ControlError(f"{name} not attached to {stack.overlay}: {exc}") from None
        return {"overlay": stack.overlay, "interface": name, **attached_ports_status(stack)[name]}

    async def detach(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """`evio detach`: {"overlay": ID, "interface": NAME}."""
        stack, name = self._attach_target(request)
        try:
            await stack.detach(name)
        except BridgeError as exc:
            raise ControlError(f"{name} not detached from {stack.overlay}: {exc}") from None
        return {"overlay": stack.overlay, "interface": name}

    def _attach_target(self, request: Mapping[str, Any]) -> tuple[OverlayStack, str]:
        overlay, name = request.get("overlay"), request.get("interface")
        stack = self.overlays.get(overlay) if isinstance(overlay, str) else None
        if stack is None:
            raise ControlError(f"no overlay {overlay!r} on this node (overlays: {', '.join(self.overlays) or 'none'})")
        if not isinstance(name, str) or not INTERFACE_NAME.fullmatch(name):
            raise ControlError(f"{name!r} is not an interface name (1 to 15 of A-Z a-z 0-9 _ . -)")
        return stack, name

    def status(self) -> dict[str, Any]:
        return {
            "version": STATUS_VERSION,
            "node_id": format_node_id(self.node_id),
            "pid": os.getpid(),
            "uptime": round(self._clock.now() - self._started_at, 3) if self._started_at is not None else None,
            "sdn_controller": self.sdn.listen_address if self.sdn is not None else None,
            "reloads": self.reloads,
            "systemd": {"notify": self._notifier is not None and self._notifier.enabled, "ready_sent": self.notified_ready,
                        "watchdog_interval": self._notifier.watchdog_interval if self._notifier else None},
            "overlays": {name: overlay_status(stack) for name, stack in self.overlays.items()},
            # process-wide: aioice's sockets serve every overlay
            "stun": {"rejected": {r.value: n for r, n in sorted(aioice_patches.STUN_REJECTED.items(), key=lambda i: i[0].value)},
                     "turn_lifetime_raised": aioice_patches.TURN_LIFETIME_RAISED},
        }


def _return_free_heap() -> None:
    """Give the C heap that startup freed back to the kernel (glibc keeps it otherwise; about 1.5 MB resident)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
