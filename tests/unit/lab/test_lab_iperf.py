"""Reading an iperf3 JSON report (evio.lab.iperf): the figures of a run, None for a failed one."""

from __future__ import annotations

import json

from evio.lab.iperf import TcpRun, parse_tcp_report

REPORT = {
    "start": {"connected": [{"socket": 5}]},
    "end": {
        "sum_sent": {"bytes": 125_400_000, "bits_per_second": 100_320_000.0, "retransmits": 17},
        "sum_received": {"bytes": 125_000_000, "bits_per_second": 100_000_000.0},
    },
}


def test_the_receiver_figures_and_the_sender_retransmissions_are_read() -> None:
    assert parse_tcp_report(json.dumps(REPORT)) == TcpRun(mbit=100.0, gigabytes=0.125, retransmits=17)


def test_a_failed_run_gives_none() -> None:
    assert parse_tcp_report("") is None  # iperf3 killed before it wrote anything
    assert parse_tcp_report('{"start": {}, "end": {}, "error": "unable to connect to server"}') is None
    assert parse_tcp_report(json.dumps(REPORT)[:200]) is None  # cut short
    assert parse_tcp_report("[]") is None
