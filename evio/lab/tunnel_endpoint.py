"""A one-tunnel endpoint process: ``python -m evio.lab.tunnel_endpoint`` (lab tool, tests, benchmarks).

Run one in each of two network namespaces; they exchange offers through Unix
sockets in ``--signal-dir`` and bring up one tunnel with a TAP, optionally with
an address on it. Events go to stdout as JSON lines, for the program that
started it::

    {"event": "ready"}                       listening for offers
    {"event": "up", "setup": 0.142, "path": "direct", "local": "host", "remote": "srflx", "tap": "evtbb00..", "t": ...}
    {"event": "down", "reason": "peer-silent", "t": ...}
    {"event": "stats", "path": "direct", "path_moves": 1, ...}   on SIGUSR1 and at exit
    {"event": "error", "reason": "..."}      setup failed

Exit status 0 after a clean run or a tunnel that went down (with
``--exit-on-down``), 1 when setup failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import ipaddress
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evio.config.model import Cipher, TunnelConfig
from evio.lab.local_signaling import UnixSocketSignaling
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.fd_datapath import FdDatapath
from evio.tunnel.datapath.interface import Datapath
from evio.tunnel.datapath.mmsg import RecvfromBatch, SendtoBatch
from evio.tunnel.datapath.tap import LinuxTap, TapDevice
from evio.tunnel.errors import TunnelError
from evio.tunnel.liveness import LivenessConfig, keepalive_for
from evio.tunnel.manager import TunnelManager
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.ice import IceConfig, RelayPolicy
from evio.tunnel.path.servers import parse_turn_uri
from evio.tunnel.path.trust import TrustAnchor
from evio.tunnel.path.turn_credentials import TurnRelay
from evio.tunnel.session import TunnelDown, TunnelEvent, TunnelUp, default_datapath_factory

logger = logging.getLogger(__name__)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}")
    return host, int(port)


def _turn_uri(text: str) -> tuple[str, int, str]:
    try:
        return parse_turn_uri(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _interface(text: str) -> str:
    try:
        ipaddress.ip_interface(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _node_id(text: str) -> int:
    if len(text) != 32:
        raise argparse.ArgumentTypeError("node ids are 32 hex digits")
    return int(text, 16)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evio.lab.tunnel_endpoint", description=__doc__.splitlines()[0])
    p.add_argument("--node", type=_node_id, required=True)
    p.add_argument("--peer", type=_node_id, required=True)
    p.add_argument("--signal-dir", type=Path, required=True)
    p.add_argument("--connect", action="store_true", help="send the offer (otherwise wait for one)")
    p.add_argument("--stun", type=_host_port, action="append", default=[])
    p.add_argument("--turn", type=_turn_uri, action="append", default=[],
                   help="a TURN server, HOST:PORT (--turn-transport) or a TURN URI (turns:HOST:PORT, turn:HOST:PORT?transport=tcp); repeat: every one is used")
    p.add_argument("--turn-transport", choices=["auto", "udp", "tcp", "tls"], default="auto")
    p.add_argument("--turn-tls-port", type=int, default=5349)
    p.add_argument("--turn-ca", help="PEM CA that verifies the TURN servers' TLS certificates")
    p.add_argument("--turn-user")
    p.add_argument("--turn-password")
    p.add_argument("--turn-secret")
    p.add_argument("--relay", choices=[r.value for r in RelayPolicy], default=RelayPolicy.FALLBACK.value)
    p.add_argument("--direct-timeout", type=float, default=IceConfig.direct_timeout)
    p.add_argument("--cipher", choices=[c.value for c in Cipher], default=Cipher.AES_256_GCM.value)
    p.add_argument("--tap-prefix", default="evt")
    p.add_argument("--address", type=_interface, help="CIDR address for the TAP, e.g. 10.99.0.1/24")
    p.add_argument("--exclude-network", type=_network, action="append", default=[], metavar="CIDR",
                   help="gather no candidates in this network (repeatable): other tunnels' overlays beside this one; "
                        "the network of --address is always left out, as the daemon leaves out its overlays'")
    p.add_argument("--underlay-mtu", type=int, default=1500)
    p.add_argument("--no-path-mtu", action="store_true", help="assume --underlay-mtu end to end: no probes, nothing answered (comparison)")
    p.add_argument("--keepalive", type=float, help="seconds (default: the daemon's rule for --dead-after)")
    p.add_argument("--dead-after", type=float, default=LivenessConfig.dead_after)
    p.add_argument("--duration", type=float, help="close the tunnel and exit after this many seconds")
    p.add_argument("--exit-on-down", action="store_true")
    p.add_argument("--wrong-fingerprint", action="store_true", help="test only: signal a fingerprint that is not ours")
    p.add_argument("--trust-ca", type=Path, help="overlay CA the peer's certificate must be issued by (overlay trust anchor)")
    p.add_argument("--overlay", default="ov1", help="overlay id the certificates name (with --trust-ca, --cert)")
    p.add_argument("--cert", type=Path, help="this endpoint's certificate (PEM); default a fresh self-signed one")
    p.add_argument("--key", type=Path, help="the key of --cert (PEM)")
    p.add_argument("--no-uvloop", action="store_true")
    p.add_argument("--no-mmsg", action="store_true", help="one system call per datagram instead of sendmmsg/recvmmsg bursts (comparison)")
    p.add_argument("--no-offload", action="store_true", help="no TAP offloads or UDP GRO: one frame per TAP read/write (comparison)")
    p.add_argument("--datapath", choices=["auto", "native", "python"], default="auto",
                   help="tunnel.datapath: native (Rust), python, or auto (native where installed)")
    p.add_argument("--tso", action=argparse.BooleanOptionalAction, default=TunnelConfig.tso,
                   help="with offloads, TSO on the TAP too: the daemon segments super-frames (default: tunnel.tso's)")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.monotonic(), **fields}) + "\n")
    sys.stdout.flush()


def _stats_fields(manager: TunnelManager, peer: int) -> dict[str, Any]:
    tunnel = manager.get(peer)
    if tunnel is None:
        return {}
    s = tunnel.stats()
    return {
        "tx_frames": s.tx_frames,
        "rx_frames": s.rx_frames,
        "tx_bytes": s.tx_bytes,
        "rx_bytes": s.rx_bytes,
        "tx_epoch": s.tx_epoch,
        "rx_epoch": s.rx_epoch,
        "foreign": s.foreign,
        "tap_reads": s.tap_reads,
        "tap_writes": s.tap_writes,
        "gso_reads": s.gso_reads,
        "datapath": s.implementation,
        "gro_writes": s.gro_writes,
        "path": tunnel.info.path.value if tunnel.info.path else None,  # now: it may have moved since "up"
        "local": tunnel.info.local_candidate,
        "remote": tunnel.info.remote_candidate,
        "transport": tunnel.info.transport,
        "path_moves": s.path_moves,
        "path_mtu": tunnel.path_mtu[0],  # evio.tunnel.pmtu: the probed path MTU, None while assumed
        "mtu_source": tunnel.path_mtu[1].value,
        "drops": {r.value: n for r, n in s.drops.items()},
        "relay": tunnel.relay_status,  # TURN allocations, standby and failovers (decision 0057)
    }


async def run(args: argparse.Namespace) -> int:
    ice = IceConfig(
        stun=tuple(args.stun),
        turn=tuple(TurnRelay(host, port, args.turn_user, args.turn_password, args.turn_secret,
                             transport=args.turn_transport if transport == "auto" else transport,
                             tls_port=port if transport == "tls" else args.turn_tls_port, ca_file=args.turn_ca)
                   for host, port, transport in args.turn),
        relay=RelayPolicy(args.relay),
        direct_timeout=args.direct_timeout,
        # An address on another tunnel's TAP (or this one's, once up) is no underlay: a pair nominated
        # there nests this tunnel in the other, whose MTU refuses every full-size record (EMSGSIZE), so
        # TCP crawled at 0.06 Mbit/s while UDP's smaller datagrams still passed (benchmarks/peers_bench.py,
        # evio-python beside evio). The daemon leaves its overlays' subnets out the same way (config.py).
        exclude_networks=tuple(dict.fromkeys(
            [*args.exclude_network, *([str(ipaddress.ip_interface(args.address).network)] if args.address else [])])),
    )
    preferred = Cipher(args.cipher)
    config = TunnelSettings(
        ice=ice,
        ciphers=(preferred,),
        underlay_mtu=args.underlay_mtu,
        probe_path_mtu=not args.no_path_mtu,
        liveness=LivenessConfig(
            keepalive_interval=args.keepalive or keepalive_for(args.dead_after), dead_after=args.dead_after
        ),
        tap_prefix=args.tap_prefix,
        trust=TrustAnchor.from_file(args.overlay, args.trust_ca) if args.trust_ca else None,
        offload=not args.no_offload,
        tso=args.tso,
        datapath=args.datapath,
    )
    now = datetime.datetime.now(datetime.UTC)
    if args.cert:
        certificate = TunnelCertificate.from_files(args.cert, args.key or args.cert)
    else:
        certificate = TunnelCertificate.generate(f"{args.node:032x}", now)
    if args.wrong_fingerprint:
        certificate.fingerprint = TunnelCertificate.generate("impostor", now).fingerprint
    signaling = UnixSocketSignaling(args.signal_dir, args.node)
    done = asyncio.Event()
    status = 0

    async def tap_factory(name: str, mtu: int) -> TapDevice:
        return await LinuxTap.create(name, mtu, [args.address] if args.address else [], offload=not args.no_offload, tso=args.tso)

    def on_event(event: TunnelEvent) -> None:
        info = event.info
        if isinstance(event, TunnelUp):
            _emit(
                "up",
                setup=info.setup_seconds,
                path=info.path.value if info.path else None,
                local=info.local_candidate,
                remote=info.remote_candidate,
                transport=info.transport,
                remote_addr=list(info.remote_addr) if info.remote_addr else None,
                tap=info.tap,
                cipher=info.cipher.value if info.cipher else None,
                initiator=info.initiator,
                controlling=info.controlling,
            )
        elif isinstance(event, TunnelDown):
            _emit("down", reason=info.reason, state=info.state.value)
            if args.exit_on_down:
                done.set()

    def sendto_datapath(cfg: TunnelSettings) -> Datapath:
        return FdDatapath(
            cfg.tap_mtu,
            rekey=cfg.rekey,
            replay_window=cfg.replay_window,
            batch_factory=SendtoBatch,
            receive_batch_factory=RecvfromBatch,
        )

    datapath_factory = sendto_datapath if args.no_mmsg else default_datapath_factory

    manager = TunnelManager(
        args.node, config, certificate, signaling, on_event, tap_factory=tap_factory, datapath_factory=datapath_factory
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, done.set)
    loop.add_signal_handler(signal.SIGINT, done.set)
    loop.add_signal_handler(signal.SIGUSR1, lambda: _emit("stats", **_stats_fields(manager, args.peer)))
    manager.start()
    # Everything made so far lives as long as the process: keep it out of the collector's
    # full passes, which would otherwise stall the data path for tens of milliseconds.
    gc.freeze()
    await signaling.open()
    _emit("ready")
    try:
        if args.connect:
            try:
                await manager.connect(args.peer)
            except TunnelError as exc:
                _emit("error", reason=str(exc))
                status = 1
                done.set()
        try:
            await asyncio.wait_for(done.wait(), args.duration)
        except TimeoutError:
            pass
        _emit("stats", **_stats_fields(manager, args.peer))
    finally:
        await manager.close()
        await signaling.close()
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aioice").setLevel(max(level, logging.WARNING))
    # TURN allocations created, refreshed and deleted: few lines, and the proof of a clean teardown.
    logging.getLogger("aioice.turn").setLevel(level)
    if not args.no_uvloop:
        try:
            import uvloop

            return uvloop.run(run(args))
        except ImportError:
            pass
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
