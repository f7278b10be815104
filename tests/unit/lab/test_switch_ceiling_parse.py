"""benchmarks/switch_ceiling.py reads node_bench.py's printed summary: a format change must fail here, not leave
the benchmark's evio columns silently empty."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from switch_ceiling import parse_node_bench

# node_bench.py --nodes 10 --rounds 1 --paths 0,4 --first-packet (2026-11-29), trimmed.
SUMMARY = """\
  round 1, transit off, 0 intermediate: first packet of a new flow 3.904 ms, later 1.110 ms, packet-ins ...
| path | transit | nodes | iperf3 TCP 1 stream, Mbit/s (each round) | median | ping RTT mean / median, ms \
| CPU s/GB daemons / ovs-vswitchd | load |
|---|---|---|---|---|---|---|---|
| 0 intermediate | off | node1 -> node7 | 727 | 727 | 3.873 / 1.585 | 5.1 / 3.0 | 7.2 |
| 0 intermediate | on | node1 -> node7 | 946 | 946 | 2.284 / 1.185 | 4.6 / 2.8 | 7.3 |
| 4 intermediate | off | node1 -> node10 | 32 / - | 32 | - / - | 110.8 / 95.5 | 8.0 / 7.9 |
| 4 intermediate | on | node1 -> node10 | 178 | 178 | 5.673 / 4.155 | 29.3 / 7.9 | 6.8 |

transit fast path off:
one-way latency added per intermediate node (least squares over [0, 4] intermediates, median RTTs): 1.333 ms \
(target <= 0.15 ms)
first packet of a new flow, 0 intermediate (2 switches): first RTT 3.90 ms vs later 1.11 ms; packet-ins on the path \
40 on 10 switches (5 max; 0 later) (target <= 2 per switch, first RTT <= 2 ms)

transit fast path on:
one-way latency added per intermediate node (least squares over [0, 4] intermediates, median RTTs): 0.371 ms \
(target <= 0.15 ms)
first packet of a new flow, 4 intermediate (6 switches): first RTT 29.30 / 31.02 ms vs later 4.38 / 4.01 ms; \
packet-ins on the path 6 on 6 switches (1 max; 4 later) (target <= 2 per switch, first RTT <= 2 ms)
"""


def test_the_summary_is_read_per_transit_mode() -> None:
    figures = parse_node_bench(SUMMARY)
    assert figures.mbit == {("off", 0): 727.0, ("on", 0): 946.0, ("off", 4): 32.0, ("on", 4): 178.0}
    assert figures.rtt_ms == {("off", 0): 1.585, ("on", 0): 1.185, ("on", 4): 4.155}  # "-" is no figure
    assert figures.first_ms == {("off", 0): [3.90], ("on", 4): [29.30, 31.02]}
    assert figures.per_node_ms == {"off": 1.333, "on": 0.371}
    assert figures.loads == [7.2, 7.3, 8.0, 7.9, 6.8]


def test_output_without_a_summary_gives_no_figures() -> None:
    figures = parse_node_bench("lab t1234: 10 nodes up in 19.3 s\nSystemExit: the overlay did not settle in 100 s\n")
    assert not figures.mbit and not figures.rtt_ms and not figures.first_ms and not figures.per_node_ms
