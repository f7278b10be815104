"""A standalone Bounded Flood controller for one node: ``python -m evio.lab.sdn_controller``.

Laid out as the daemon is (asyncio in the main thread, os-ken beside it, the
typed boundary between), but driven from the command line: the bridge tests
and the lab use it to program a namespace's OVS without a whole daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evio.config.model import BridgeConfig, OnDemandConfig
from evio.ids import parse_node_id
from evio.sdn.boundary import AsyncioEventSink, ControllerChannel, event_as_dict
from evio.sdn.ofapp import ControllerConfig, start_controller_thread
from evio.sdn.vswitchd_peer_check import VswitchdPeerCheck

log = logging.getLogger(__name__)




def _parse_overlay(text: str) -> tuple[str, int]:
    name, _, dpid = text.partition("=")
    try:
        return name, int(dpid, 16)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected OVERLAY=DATAPATH_ID_HEX, got {text!r}") from None


def _parse_peer(text: str) -> tuple[str, str, int]:
    overlay, _, rest = text.partition(":")
    tap, _, nid = rest.partition("=")
    if not overlay or not tap or not nid:
        raise argparse.ArgumentTypeError(f"expected OVERLAY:TAPNAME=NODEID, got {text!r}")
    return overlay, tap, parse_node_id(nid)


def main(argv: Sequence[str] | None = None) -> int:
    """A standalone controller for one node: `python -m evio.lab.sdn_controller --node-id HEX --overlay NAME=DPID ...`.

    Laid out as the daemon is: asyncio in the main thread, os-ken beside it,
    the boundary between; optionally announces the addresses of `--announce`
    interfaces with gratuitous ARP. Ends on SIGTERM or SIGINT.
    """
    ap = argparse.ArgumentParser(prog="python -m evio.lab.sdn_controller", description=main.__doc__)
    ap.add_argument("--node-id", type=parse_node_id, required=True)
    ap.add_argument("--overlay", type=_parse_overlay, action="append", required=True,
                    help="OVERLAY=DATAPATH_ID_HEX, once per bridge")
    ap.add_argument("--peer", type=_parse_peer, action="append", default=[], help="OVERLAY:TAPNAME=NODEID")
    ap.add_argument("--announce", action="append", default=[], metavar="IFNAME",
                    help="send gratuitous ARP for this interface's IPv4 addresses when they appear")
    ap.add_argument("--listen-host", default="127.0.0.1")
    ap.add_argument("--listen-port", type=int, default=6653)
    ap.add_argument("--flow-idle-timeout", type=int, default=BridgeConfig.flow_idle_timeout)
    ap.add_argument("--stats-interval", type=float, default=5.0)
    ap.add_argument("--on-demand-threshold", type=float, default=OnDemandConfig.threshold_bytes_per_s,
                    help="bytes/s")
    ap.add_argument("--on-demand-idle", type=float, default=OnDemandConfig.idle_timeout, help="seconds")
    ap.add_argument("--events", help="append controller events here as JSON lines")
    ap.add_argument("--switch-run-dir", type=Path,
                    help="accept OpenFlow connections only from the ovs-vswitchd whose pidfile is in this directory")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from evio.sdn.address_announcer import GarpAnnouncer

    loop = asyncio.get_running_loop()
    sink = AsyncioEventSink(loop)
    channel = ControllerChannel(sink)
    on_demand = OnDemandConfig(threshold_bytes_per_s=args.on_demand_threshold, idle_timeout=args.on_demand_idle)
    for overlay, dpid in args.overlay:
        channel.commands.attach(overlay, dpid, args.node_id, flow_idle_timeout=args.flow_idle_timeout,
                                on_demand=on_demand)
    for overlay, tap, peer in args.peer:
        channel.commands.peer_up(overlay, tap, peer)
    stopped: asyncio.Future[int] = loop.create_future()

    def controller_exit(error: BaseException | None) -> None:
        def settle() -> None:
            if not stopped.done():
                stopped.set_result(1)

        loop.call_soon_threadsafe(settle)

    def terminate() -> None:
        if not stopped.done():
            stopped.set_result(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, terminate)
    peer_check = VswitchdPeerCheck(args.switch_run_dir) if args.switch_run_dir is not None else None
    config = ControllerConfig(channel, stats_interval=args.stats_interval, peer_check=peer_check)
    start_controller_thread(config, args.listen_host, args.listen_port, on_exit=controller_exit)
    events_file = open(args.events, "a", buffering=1) if args.events else None  # noqa: SIM115
    try:
        async with asyncio.TaskGroup() as tasks:
            writer = tasks.create_task(_write_events(sink, events_file))
            announcer = (tasks.create_task(GarpAnnouncer(set(args.announce)).run()) if args.announce else None)
            status = await stopped
            for task in (writer, announcer):
                if task is not None:
                    task.cancel()
    finally:
        if events_file is not None:
            events_file.close()
    return status


async def _write_events(sink: AsyncioEventSink, out: Any) -> None:
    while True:
        event = await sink.get()
        log.info("controller event %s", event)
        if out is not None:
            with contextlib.suppress(OSError):
                out.write(json.dumps(event_as_dict(event)) + "\n")


if __name__ == "__main__":
    sys.exit(main())
