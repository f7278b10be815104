"""A tunnel between this release and the previous one (previous_release.py): this end's path MTU probes
go unanswered (the previous release counts each `bad-control` and carries on), its path MTU stays
`assumed` after the search gives up, it probes no more, and the tunnel carries traffic both ways as before
(docs/decisions/0050)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from previous_release import PreviousRelease, PreviousReleaseMissing, build

from evio.lab.tunnel_testbed import EndpointProcess, VethTestbed, run, unique_prefix
from evio.testing.waiting import holds_within, wait_for_value
from evio.tunnel import pmtu

pytestmark = pytest.mark.lab

ID_A, ID_B = "aa" * 16, "bb" * 16
PROBES = pmtu.MAX_PROBES * 5  # every size of the first round, lost MAX_PROBES times
SEARCH_TIMEOUT = 15.0  # three rounds of 1 s, at the supervisor's ticks, on a loaded host


@pytest.fixture(scope="module")
def previous() -> PreviousRelease:
    try:
        return build()
    except PreviousReleaseMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture
def veth() -> Iterator[VethTestbed]:
    with VethTestbed(unique_prefix("evq")) as tb:
        yield tb


def test_probes_to_the_previous_release_go_unanswered_and_the_tunnel_carries_on(
    veth: VethTestbed, previous: PreviousRelease
) -> None:
    with tempfile.TemporaryDirectory(prefix="evq-") as d:
        workdir = Path(d)
        common = ["--signal-dir", str(workdir)]
        old = EndpointProcess(veth.b.netns, ["--node", ID_B, "--peer", ID_A, "--address", "10.99.0.2/24", *common],
                              workdir / "old.log", python=(str(previous.python), "-I"))  # fmt: skip
        new = None
        try:
            old.wait_event("ready")
            new = EndpointProcess(veth.a.netns, ["--node", ID_A, "--peer", ID_B, "--connect", "--address", "10.99.0.1/24",
                                                 *common], workdir / "new.log")  # fmt: skip
            new.wait_event("up", timeout=15)
            old.wait_event("up", timeout=15)
            counted = wait_for_value(lambda: old.stats()["drops"].get("bad-control", 0), lambda n: n >= PROBES,
                                     SEARCH_TIMEOUT, what="the previous release counting every probe")  # fmt: skip
            assert counted == PROBES, old.stats()
            ended = wait_for_value(new.stats, lambda s: s["mtu_source"] == "assumed", 5, what="the search given up")
            assert ended["path_mtu"] is None, ended
            # Given up: no probe for the next PMTU_RAISE_TIMER (600 s); none in the next few rounds' time.
            assert not holds_within(lambda: old.stats()["drops"].get("bad-control", 0) > PROBES, 4.0)
            for netns, address in ((veth.a.netns, "10.99.0.2"), (veth.b.netns, "10.99.0.1")):
                out = run(["ping", "-c", "3", "-i", "0.1", "-W", "2", "-s", "1400", address], netns, check=False).stdout
                assert " 3 received" in out, out
            assert not {"forged", "replayed", "truncated", "path-too-big"} & set(new.stats()["drops"])
        finally:
            for end in (new, old):
                if end is not None:
                    end.stop()
