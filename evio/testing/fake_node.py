"""Fakes for the daemon's parts (evio.node.platform.Platform) and a platform made of them.

- `FakeOvsdb`: a CommandRunner that plays ovs-vsctl and ip for `evio.bridge.OvsBridge`: bridges, their
  ports and addresses, kept in dicts, with injectable failures.
- `FakeSdn`: the SDN controller's boundary without os-ken: commands are applied to plain state on
  `sync()`; tests push controller events with `emit()`.
- links: `evio.testing.fake_links.FakeLinkHub` (re-exported here), the one fake of the TunnelManager
  contract, shared with the overlay controller's tests.
- `FakePlatform`: all of the above plus `evio.testing.fake_signal` accounts, for `evio.node.Node`.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evio.bridge.commands import CommandError
from evio.bridge.ovs_bridge import OvsBridge
from evio.clock import REAL_CLOCK, Clock
from evio.node.overlay_parts import AdjacencyController, Bridge, LinkManager
from evio.node.plan import OverlayPlan
from evio.node.platform import AddressAnnouncer
from evio.node.sdn import SdnController
from evio.overlay.orchestrator import Timings
from evio.sdn.boundary import (
    AttachOverlay,
    CommandQueue,
    ControllerEvent,
    DetachOverlay,
    PeerPortDown,
    PeerPortUp,
    SetOnDemand,
    SetPolicy,
)
from evio.signal.client import SignalSettings
from evio.signal.interface import Signaling
from evio.testing.fake_links import FakeLinkHub, FakeLinks
from evio.testing.fake_signal import FakeSignalHub
from evio.tunnel.session import TunnelEvent

# ------------------------------------------------------------------------------------------ OVSDB


@dataclass
class FakeBridgeRow:
    datapath_type: str = ""
    settings: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    up: bool = False



# The fake hub delivers presence at once, so the waits a real server needs (members' presence
# trickling in after login, debouncing a burst of them) only slow fleets on real time down.
FAKE_TIMINGS = Timings(reevaluate_interval=0.5, settle_after_login=0.1, membership_debounce=0.05,
                       membership_max_delay=0.2)


class FakeOvsdb:
    """Plays `ovs-vsctl` (the subset OvsBridge uses) and `ip address/link` against dicts."""

    def __init__(self) -> None:
        self.bridges: dict[str, FakeBridgeRow] = {}
        self.open_vswitch: dict[str, str] = {"other_config:userspace-tso-enable": "true"}
        self.calls: list[list[str]] = []
        self.failures: dict[str, int] = {}  # verb (add-br, add-port, del-port, del-br) -> how many calls fail
        # Host interfaces `ip -j -d link show` describes (its JSON fields: "linkinfo", "master", "mtu", ...),
        # and the interfaces of the default routes, for attached ports (evio.bridge.host_ports).
        self.host_links: dict[str, dict[str, Any]] = {}
        self.default_routes: set[str] = set()

    def add_host_link(self, name: str, **fields: Any) -> None:
        self.host_links[name] = {"ifname": name, "flags": ["BROADCAST", "MULTICAST"], "mtu": 1500, **fields}

    def fail(self, verb: str, times: int = 1) -> None:
        self.failures[verb] = self.failures.get(verb, 0) + times

    async def run(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.calls.append(argv)
        await asyncio.sleep(0)  # a subprocess never answers synchronously
        if argv[0] == "ip":
            return self._ip(argv)
        if argv[0] != "ovs-vsctl":
            raise CommandError(argv, 127, f"{argv[0]}: not found")
        out: list[str] = []
        for command in _split_commands(argv[1:]):
            out.append(self._vsctl(argv, command))
        return "".join(out)

    def ports(self, bridge: str) -> list[str]:
        row = self.bridges.get(bridge)
        return list(row.ports) if row else []

    def _vsctl(self, argv: list[str], command: list[str]) -> str:
        words = [w for w in command if not w.startswith("--")]
        if not words:
            return ""
        verb, args = words[0], words[1:]
        if self.failures.get(verb, 0) > 0:
            self.failures[verb] -= 1
            raise CommandError(argv, 1, f"ovs-vsctl: injected failure of {verb}")
        if verb == "add-br":
            self.bridges.setdefault(args[0], FakeBridgeRow())
        elif verb == "del-br":
            if self.bridges.pop(args[0], None) is None and "--if-exists" not in command:
                raise CommandError(argv, 1, f"ovs-vsctl: no bridge named {args[0]}")
        elif verb == "add-port":
            row = self._bridge(argv, args[0])
            if args[1] not in row.ports:
                row.ports.append(args[1])
        elif verb == "del-port":
            for row in self.bridges.values():
                if args[-1] in row.ports:
                    row.ports.remove(args[-1])
                    break
            else:
                if "--if-exists" not in command:
                    raise CommandError(argv, 1, f"ovs-vsctl: no port named {args[-1]}")
        elif verb == "port-to-br":
            for name, row in self.bridges.items():
                if args[0] in row.ports:
                    return name + "\n"
            raise CommandError(argv, 1, f"ovs-vsctl: no port named {args[0]}")
        elif verb == "list-ports":
            return "".join(p + "\n" for p in self._bridge(argv, args[0]).ports)
        elif verb == "set" and args[0] == "Bridge":
            row = self._bridge(argv, args[1])
            row.settings += args[2:]
            for setting in args[2:]:
                if setting.startswith("datapath_type="):
                    row.datapath_type = setting.partition("=")[2]
        elif verb == "set" and args[0] == "Open_vSwitch":
            for setting in args[2:]:
                key, _, value = setting.partition("=")
                self.open_vswitch[key] = value
        elif verb == "get" and args[0] == "Open_vSwitch":
            return self.open_vswitch.get(args[2], "") + "\n"
        elif verb == "get" and args[0] == "Interface":
            for row in self.bridges.values():
                if args[1] in row.ports:
                    return f"{row.ports.index(args[1]) + 1}\n"
            raise CommandError(argv, 1, f"ovs-vsctl: no row {args[1]} in table Interface")
        return ""

    def _bridge(self, argv: list[str], name: str) -> FakeBridgeRow:
        row = self.bridges.get(name)
        if row is None:
            raise CommandError(argv, 1, f"ovs-vsctl: no bridge named {name}")
        return row

    def _ip(self, argv: list[str]) -> str:
        if argv[1] == "-j":
            return self._ip_json(argv)
        if argv[1:4] == ["link", "set", "dev"] and argv[4] in self.host_links:
            if argv[5:] == ["up"]:
                self.host_links[argv[4]]["flags"].append("UP")
            return ""
        if argv[1:3] == ["address", "replace"]:
            self._bridge(argv, argv[-1]).addresses.append(argv[3])
        elif argv[1:3] == ["link", "set"]:
            self._bridge(argv, argv[3]).up = argv[-1] == "up"
        return ""


    def _ip_json(self, argv: list[str]) -> str:
        if "route" in argv:  # ip -j -4|-6 route show default
            return json.dumps([{"dst": "default", "dev": dev} for dev in sorted(self.default_routes)])
        name = argv[-1]  # ip -j -d link show dev NAME
        if name in self.host_links:
            return json.dumps([self.host_links[name]])
        if name in self.bridges:
            return json.dumps([{"ifname": name, "flags": ["UP"] if self.bridges[name].up else []}])
        raise CommandError(argv, 1, f'Device "{name}" does not exist.')


def _split_commands(args: list[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for word in args:
        if word == "--":
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


# ------------------------------------------------------------------------------------------ SDN


class FakeSdn:
    """The controller boundary with no os-ken behind it."""

    listen_address = "unix:/run/openvswitch/evio/fake.sock"

    def __init__(self) -> None:
        self.commands = CommandQueue()
        self._events: asyncio.Queue[ControllerEvent] | None = None
        self._stopped: asyncio.Future[str] | None = None
        self.started = False
        self.attached: dict[str, AttachOverlay] = {}
        self.peer_ports: dict[tuple[str, str], int] = {}  # (overlay, TAP) -> peer
        self.history: list[object] = []

    async def start(self) -> None:
        self._events = asyncio.Queue()
        self._stopped = asyncio.get_running_loop().create_future()
        self.started = True

    def sync(self) -> None:
        """Apply the commands the node sent since the last call."""
        for command in self.commands.drain():
            self.history.append(command)
            if isinstance(command, AttachOverlay):
                self.attached[command.overlay] = command
            elif isinstance(command, DetachOverlay):
                self.attached.pop(command.overlay, None)
                for key in [k for k in self.peer_ports if k[0] == command.overlay]:
                    del self.peer_ports[key]
            elif isinstance(command, SetOnDemand):
                if command.overlay in self.attached:
                    self.attached[command.overlay] = replace(self.attached[command.overlay], on_demand=command.on_demand)
            elif isinstance(command, SetPolicy):
                if command.overlay in self.attached:
                    self.attached[command.overlay] = replace(self.attached[command.overlay], policy=command.rules)
            elif isinstance(command, PeerPortUp):
                self.peer_ports[(command.overlay, command.port_name)] = command.peer
            elif isinstance(command, PeerPortDown):
                self.peer_ports.pop((command.overlay, command.port_name), None)

    def emit(self, event: ControllerEvent) -> None:
        assert self._events is not None, "not started"
        self._events.put_nowait(event)

    def crash(self, reason: str = "fake controller crashed") -> None:
        assert self._stopped is not None, "not started"
        if not self._stopped.done():
            self._stopped.set_result(reason)

    async def next_event(self) -> ControllerEvent:
        assert self._events is not None, "not started"
        return await self._events.get()

    async def wait_stopped(self) -> str:
        assert self._stopped is not None, "not started"
        return await asyncio.shield(self._stopped)


# ------------------------------------------------------------------------------------------ platform

__all__ = ["ControllerFactory", "FakeLinkHub", "FakeLinks", "FakeOvsdb", "FakePlatform", "FakeSdn"]

ControllerFactory = Callable[[OverlayPlan, int, Signaling, LinkManager], AdjacencyController]


class FakePlatform:
    """One node's parts on shared fake infrastructure (signal hub, link hub)."""

    def __init__(
        self,
        signal_hub: FakeSignalHub,
        link_hub: FakeLinkHub,
        controller_factory: ControllerFactory | None = None,
        seed: int = 0,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self.clock = clock  # the overlay controllers' (the hubs have theirs)
        self.signal_hub = signal_hub
        self.link_hub = link_hub
        self.controller_factory = controller_factory
        self.rng = random.Random(seed)
        self.ovsdb = FakeOvsdb()
        self.sdn = FakeSdn()
        self.links_made: dict[str, FakeLinks] = {}
        self.clients: list[Signaling] = []

    def signal_client(self, settings: SignalSettings) -> Signaling:
        client = self.signal_hub.client(settings.jid, settings.memberships, rng=random.Random(self.rng.getrandbits(32)),
                                        identities=settings.identities)
        self.clients.append(client)
        return client

    def sdn_controller(self) -> SdnController:
        return self.sdn

    def bridge(self, plan: OverlayPlan) -> Bridge:
        return OvsBridge(plan.bridge, self.ovsdb, plan.datapath)

    def links(
        self, plan: OverlayPlan, node_id: int, signaling: Signaling, on_event: Callable[[TunnelEvent], None]
    ) -> LinkManager:
        links = self.link_hub.links(plan.id, node_id, on_event, plan.tunnel.tap_prefix)
        self.links_made[plan.id] = links
        return links

    def overlay_controller(
        self, plan: OverlayPlan, node_id: int, signaling: Signaling, links: LinkManager
    ) -> AdjacencyController:
        if self.controller_factory is not None:
            return self.controller_factory(plan, node_id, signaling, links)
        from evio.overlay.controller import OverlayController

        controller: AdjacencyController = OverlayController(
            plan.id, node_id, plan.config.topology, signaling, links,
            rng=random.Random(self.rng.getrandbits(32)), clock=self.clock, reevaluate_interval=0.5,
            limits=plan.config.limits, timings=FAKE_TIMINGS,
        )  # fmt: skip
        return controller

    def address_announcer(self, interfaces: set[str]) -> AddressAnnouncer | None:
        return None
