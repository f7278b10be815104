"""Lab.up / down / status over the fake host: cleanup on failure, interruption and crash. No root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evio.lab import daemons
from evio.lab.errors import LabCommandError, LabError, LabExistsError, LabNotFoundError
from evio.lab.lab import Lab, Progress
from evio.testing.lab_host import FakeHost


def empty(host: FakeHost, root: Path, prefix: str = "evlt1-") -> None:
    assert not [ns for ns in host.namespaces if ns.startswith(prefix)]
    assert not [link for link in host.root_links() if link.startswith(prefix)]
    assert not [p for p in host.processes.values() if p.netns and p.netns.startswith(prefix)]
    assert not (root / "t1").exists()


def test_up_builds_everything_and_down_removes_it(tmp_path: Path) -> None:
    host = FakeHost()
    steps: list[Progress] = []
    lab = Lab.up("t1", nodes=3, nat="mixed", rate_mbit=10, root=tmp_path, host=host, progress=steps.append)
    assert host.namespaces == {"evlt1-pub", "evlt1-n1", "evlt1-n2", "evlt1-n3", "evlt1-r1", "evlt1-r2", "evlt1-r3"}
    assert host.links["evlt1-pub"] >= {"evlt1-br", "evlt1-p1", "evlt1-p2", "evlt1-p3", "evlt1-sk0"}
    assert set(host.nft_rulesets) == {"evlt1-r1", "evlt1-r2"}  # node 3 has no NAT
    assert all(len(host.qdiscs[r]) == 2 for r in ("evlt1-r1", "evlt1-r2", "evlt1-r3"))
    assert sorted(p.role for p in host.processes.values()) == ["coturn", "prosody"]
    registered = sorted(argv[4] for _, argv in host.commands if argv[:1] == ("prosodyctl",))
    assert registered == ["node1", "node2", "node3"]
    assert steps[-1].step == "configs" and {"namespaces", "routers", "accounts", "prosody"} <= {s.step for s in steps}
    assert [s.done for s in steps if s.step == "routers"] == [1, 2, 3]

    node = lab.node(2)
    assert (node.netns, node.nat, node.jid) == ("evlt1-n2", "symmetric", "node2@overlay.test")
    assert json.loads(node.config_path.read_text())["overlays"]["ov1"]["signal"]["password"] == node.password
    assert lab.public.ca_file.exists() and lab.public.muc_room == "ov1@conference.overlay.test"

    status = Lab.status("t1", root=tmp_path, host=host)
    assert status.healthy and len(status.nodes) == 3
    report = Lab.down("t1", root=tmp_path, host=host)
    assert len(report.namespaces) == 7 and len(report.processes) == 2
    empty(host, tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_up_raises_the_hosts_neighbour_tables_to_fit_the_lab_and_never_lowers_them(tmp_path: Path) -> None:
    # One neighbour table serves every namespace: at the kernel's 1024 entries a 32-node lab lost pairs.
    host = FakeHost()
    host.host_sysctls["net/ipv6/neigh/default/gc_thresh3"] = 100_000  # an operator's own, larger value
    with Lab.up("t1", nodes=32, root=tmp_path, host=host):
        for family in ("ipv4", "ipv6"):
            soft = host.host_sysctls[f"net/{family}/neigh/default/gc_thresh2"]
            assert soft >= 2 * 32 * 31  # two such labs' all pairs (and room for the host)
            assert host.host_sysctls[f"net/{family}/neigh/default/gc_thresh1"] == 128  # not touched
        assert host.host_sysctls["net/ipv4/neigh/default/gc_thresh3"] == 2 * host.host_sysctls["net/ipv4/neigh/default/gc_thresh2"]
        assert host.host_sysctls["net/ipv6/neigh/default/gc_thresh3"] == 100_000
    small = FakeHost()
    with Lab.up("t1", nodes=2, root=tmp_path, host=small):
        assert small.host_sysctls["net/ipv4/neigh/default/gc_thresh3"] == 1024  # the default fits two nodes


def test_context_manager_tears_down_on_exception(tmp_path: Path) -> None:
    host = FakeHost()
    with pytest.raises(RuntimeError), Lab.up("t1", nodes=2, root=tmp_path, host=host):
        raise RuntimeError("test body failed")
    empty(host, tmp_path)


def test_up_failing_at_any_step_leaves_nothing(tmp_path: Path) -> None:
    counter = FakeHost()
    Lab.up("t1", nodes=2, nat="mixed", root=tmp_path, host=counter)
    calls_of_up = counter.calls
    Lab.down("t1", root=tmp_path, host=counter)
    assert calls_of_up > 10
    for fail_at in range(1, calls_of_up + 1):
        host = FakeHost(fail_at=fail_at)
        with pytest.raises(LabCommandError):
            Lab.up("t1", nodes=2, nat="mixed", root=tmp_path, host=host)
        empty(host, tmp_path)


def test_ctrl_c_during_up_cleans_up_and_propagates(tmp_path: Path) -> None:
    host = FakeHost()

    def interrupt(p: Progress) -> None:
        if p.step == "routers" and p.done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Lab.up("t1", nodes=3, root=tmp_path, host=host, progress=interrupt)
    empty(host, tmp_path)


def test_down_after_a_crash_with_a_corrupt_state_file_uses_the_prefix(tmp_path: Path) -> None:
    host = FakeHost()
    Lab.up("t1", nodes=2, root=tmp_path, host=host)
    daemon = host.add_process("evio", "evlt1-n1")  # started by a test inside a node
    (tmp_path / "t1" / "state.json").write_text('{"version": 1, "na')  # crash mid-write
    foreign = host.add_process("other", None)
    host.namespaces.add("evsa-n1")  # another helper's namespace
    Lab.down("t1", root=tmp_path, host=host)
    empty(host, tmp_path)
    assert daemon.pid not in host.processes
    assert foreign.pid in host.processes and "evsa-n1" in host.namespaces


def test_down_of_a_lab_that_does_not_exist_is_a_no_op(tmp_path: Path) -> None:
    host = FakeHost()
    report = Lab.down("t1", root=tmp_path, host=host)
    assert not report.removed_anything


def test_down_reports_what_it_could_not_remove(tmp_path: Path) -> None:
    host = FakeHost()
    Lab.up("t1", nodes=1, root=tmp_path, host=host)
    stuck = host.add_process("stuck", "evlt1-n1")
    host.unkillable.add(stuck.pid)
    with pytest.raises(LabError, match=str(stuck.pid)):
        Lab.down("t1", root=tmp_path, host=host)


def test_up_refuses_an_existing_lab_and_leftovers(tmp_path: Path) -> None:
    host = FakeHost()
    Lab.up("t1", nodes=1, root=tmp_path, host=host)
    with pytest.raises(LabExistsError):
        Lab.up("t1", nodes=1, root=tmp_path, host=host)
    assert len(host.namespaces) == 3  # the refused up removed nothing of the running lab
    Lab.down("t1", root=tmp_path, host=host)
    host.namespaces.add("evlt1-n7")  # a leftover without a state file
    with pytest.raises(LabExistsError):
        Lab.up("t1", nodes=1, root=tmp_path, host=host)


def test_attach_spawn_and_register_account(tmp_path: Path) -> None:
    host = FakeHost()
    Lab.up("t1", nodes=2, root=tmp_path, host=host)
    lab = Lab.attach("t1", root=tmp_path, host=host)
    record = lab.spawn("node1", ["sleep", "100"], role="sleeper")
    assert record.netns == "evlt1-n1"
    assert record in Lab.attach("t1", root=tmp_path, host=host).processes  # recorded in the state file
    jid, password = lab.register_account("outsider")
    assert jid == "outsider@overlay.test" and password
    assert ("prosodyctl", "--config", str(tmp_path / "t1/prosody/prosody.cfg.lua"), "register", "outsider",
            "overlay.test", password) in [argv for _, argv in host.commands]
    lab.stop(record)
    assert record not in Lab.attach("t1", root=tmp_path, host=host).processes
    Lab.down("t1", root=tmp_path, host=host)
    with pytest.raises(LabNotFoundError):
        Lab.attach("t1", root=tmp_path, host=host)


def test_services_can_be_stopped_and_started_again(tmp_path: Path) -> None:
    host = FakeHost()
    lab = Lab.up("t1", nodes=1, root=tmp_path, host=host)
    lab.stop_service("prosody")
    assert [p.role for p in lab.processes] == ["coturn"]
    record = lab.start_service("prosody")
    assert host.is_running(record) and record.netns == "evlt1-pub"
    with pytest.raises(LabError):
        lab.start_service("prosody")  # already running
    assert record in Lab.attach("t1", root=tmp_path, host=host).processes
    Lab.down("t1", root=tmp_path, host=host)
    assert not host.processes


def test_renumber_gives_a_stopped_node_a_new_id_in_its_config_and_the_lab_state(tmp_path: Path) -> None:
    host = FakeHost()
    with Lab.up("t1", nodes=3, root=tmp_path, host=host) as lab:
        old = lab.node(2).node_id
        new = lab.renumber(2)
        assert new != old and len(new) == 32 and int(new, 16) >= 0
        assert lab.node(2).node_id == new
        assert json.loads(lab.node(2).config_path.read_text())["node"]["id"] == new
        assert Lab.attach("t1", root=tmp_path, host=host).node(2).node_id == new  # saved, not only in memory
        assert [lab.node(i).node_id for i in (1, 3)] == [n.node_id for n in lab.nodes if n.index != 2]


def test_renumber_refuses_a_node_whose_certificate_names_its_id(tmp_path: Path) -> None:
    host = FakeHost()
    with Lab.up("t1", nodes=2, root=tmp_path, host=host, trust=True) as lab:
        old = lab.node(1).node_id
        with pytest.raises(LabError, match="certificate"):
            lab.renumber(1)
        assert lab.node(1).node_id == old
        assert json.loads(lab.node(1).config_path.read_text())["node"]["id"] == old


def test_a_node_runs_the_evio_it_was_given_and_keeps_it_until_given_another(tmp_path: Path) -> None:
    """A rolling upgrade's lab (tests/lab/test_upgrade.py): some nodes run another installation's evio."""
    host = FakeHost()
    previous = ("/cache/previous/venv/bin/python", "-I", "-m", "evio")
    with Lab.up("t1", nodes=2, root=tmp_path, host=host, node_evio={1: previous}) as lab:
        first, second = lab.start_daemon(1), lab.start_daemon(2)
        assert first.argv[-7:] == (*previous, "run", "--config", str(lab.node(1).config_path))
        assert second.argv[-6:-3] == daemons.evio_command()
        assert Lab.attach("t1", root=tmp_path, host=host).evio_command(1) == previous  # in the state, not only here
        lab.stop_daemon(1)
        assert lab.start_daemon(1).argv[-7:-3] == previous  # a restart runs what ran before
        lab.stop_daemon(1)
        assert lab.start_daemon(1, daemons.evio_command()).argv[-6:-3] == daemons.evio_command()  # upgraded
        lab.stop_daemon(1)
        assert lab.start_daemon(1).argv[-6:-3] == daemons.evio_command()  # and it stays so
