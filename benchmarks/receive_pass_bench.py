#!/usr/bin/env python3
"""The Python receive pass of this checkout against another's, CPU per frame, in one process.

    .venv/bin/python benchmarks/receive_pass_bench.py --against ../main [--relayed] [--offload] [--bursts 4200]

For a change to ``FdDatapath``'s per-frame code, where an end-to-end run
(tunnel_bench.py --against) is too noisy to tell a few per cent apart on a
shared machine. Both data paths receive the same records (1442-byte frames,
AES-GCM, sealed beforehand by the pure codec) over loopback UDP, 64 per burst,
and write them to a socketpair standing in for the TAP; bursts alternate
between the two (so load changes hit both alike) and only the receive pass's
own thread CPU time is summed. ``--relayed``: records in ChannelData;
``--offload``: the offload pass (``_sock_pass_offload``, per-datagram, which a
node with TAP offloads runs) instead of the plain one. No root, no namespaces.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.config.model import Cipher  # noqa: E402
from evio.testing.fake_tunnel import FakeTap, FakeUnderlay  # noqa: E402
from evio.tunnel.datapath import fd_datapath  # noqa: E402
from evio.tunnel.datapath.keys import EXPORTER_LEN, make_aead, split_exporter  # noqa: E402
from evio.tunnel.datapath.record import KIND_FRAME, seal  # noqa: E402

MTU = 1428
BURST = 64
FRAME = (b"\x02" * 12 + b"\x08\x00").ljust(MTU + 14, b"\xab")
CHANNEL = 0x4001


# The data path's modules under their names in the flat layout before evio/tunnel/datapath/ (a baseline
# checkout from before it imports them so; this tree's stand in while its fd_datapath loads).
_FLAT_NAMES = {
    "evio.tunnel.buffers": "evio.tunnel.datapath.buffers", "evio.tunnel.datapath": "evio.tunnel.datapath.interface",
    "evio.tunnel.keys": "evio.tunnel.datapath.keys", "evio.tunnel.mmsg": "evio.tunnel.datapath.mmsg",
    "evio.tunnel.mtu": "evio.tunnel.datapath.mtu", "evio.tunnel.offload": "evio.tunnel.datapath.offload",
    "evio.tunnel.record": "evio.tunnel.datapath.record", "evio.tunnel.replay": "evio.tunnel.datapath.replay",
    "evio.tunnel.stun_guard": "evio.tunnel.stun_framing", "evio.tunnel.transit": "evio.tunnel.datapath.transit_table",
    "evio.tunnel.underlay": "evio.tunnel.datapath.interface",
}
# The Python data path's own modules (its send and receive halves and their state), loaded from the baseline.
_SPLIT_PARTS = ("fd_state", "send", "receive", "fd_datapath")


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def baseline_module(tree: Path) -> Any:
    """The other checkout's FdDatapath module, on top of this checkout's other modules."""
    flat = tree / "evio" / "tunnel" / "fd_datapath.py"
    names = list(_FLAT_NAMES) if flat.exists() else [f"evio.tunnel.datapath.{part}" for part in _SPLIT_PARTS]
    saved = {name: sys.modules[name] for name in names if name in sys.modules}
    try:
        if flat.exists():
            for old, new in _FLAT_NAMES.items():
                sys.modules[old] = importlib.import_module(new)
            return _load("baseline_fd_datapath", flat)
        module = None
        for name in names:  # each part imports the ones before it: the baseline's, from sys.modules
            module = sys.modules[name] = _load(name, tree / "evio" / "tunnel" / "datapath" / f"{name.rsplit('.', 1)[1]}.py")
        return module
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


async def measure(args: argparse.Namespace) -> dict[str, float]:
    material = os.urandom(EXPORTER_LEN)
    keys = split_exporter(material, Cipher.AES_256_GCM, True).tx.keys()
    aead = make_aead(Cipher.AES_256_GCM, keys.key)
    channel = CHANNEL if args.relayed else None
    ends: dict[str, list[Any]] = {}
    for name, module in (("baseline", baseline_module(Path(args.against))), ("this tree", fd_datapath)):
        underlay, tap = FakeUnderlay(channel), FakeTap()
        dp = module.FdDatapath(MTU)
        dp.start(tap.fd, underlay, split_exporter(material, Cipher.AES_256_GCM, False), lambda _message: None)
        dp._loop.remove_reader(dp._sock_fd)  # the passes run when this loop calls them, not the event loop
        dp._loop.remove_reader(tap.fd)
        ends[name] = [dp, underlay, tap, 0, 0]  # data path, underlay, TAP, next counter, CPU ns
    run = "_sock_pass_offload" if args.offload else "_sock_pass"
    for burst in range(args.bursts):
        order = list(ends.values())
        for end in order if burst % 2 else order[::-1]:
            dp, underlay, tap, counter, _ = end
            for i in range(BURST):
                record = seal(aead, keys.iv, KIND_FRAME, 0, counter + i, FRAME)
                if channel is not None:
                    record = channel.to_bytes(2, "big") + len(record).to_bytes(2, "big") + record
                underlay.wire_end.sendto(record, underlay.sock.getsockname())
            end[3] = counter + BURST
            began = time.thread_time_ns()
            opened = getattr(dp, run)()
            end[4] += time.thread_time_ns() - began
            if opened != BURST:
                raise SystemExit(f"a burst opened {opened} of {BURST} frames: {dp.stats().drops}")
            tap.frames()
    frames = args.bursts * BURST
    return {name: end[4] / frames / 1e3 for name, end in ends.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, metavar="TREE", help="the baseline checkout (main, say)")
    parser.add_argument("--relayed", action="store_true", help="records in ChannelData (a relayed path)")
    parser.add_argument("--offload", action="store_true", help="the offload pass instead of the plain one")
    parser.add_argument("--bursts", type=int, default=4200, help="bursts of 64 frames per data path (default 4200)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    us = asyncio.run(measure(args))
    mode = f"{'offload' if args.offload else 'plain'} pass, {'relayed' if args.relayed else 'direct'}"
    print(f"\nPython receive pass ({mode}), {args.bursts * BURST} frames each, bursts interleaved; baseline: {args.against}\n")
    print("| tree | CPU us per frame |")
    print("|---|---|")
    for name, value in us.items():
        print(f"| {name} | {value:.3f} |")
    print(f"| this / baseline | {us['this tree'] / us['baseline']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
