"""Pictures: the overlay as Fig. 3 (lab and simulator share the drawing), path length histograms."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evio.cli import main
from evio.cli.lab_node_cmd import ring_picture
from evio.lab.daemons import LinkView, Topology
from evio.plots.cdf import draw_cdfs, percentile, share_at_least
from evio.plots.histograms import draw_path_histograms
from evio.plots.ring import MAX_DRAWN_NODES, PlotError, RingLink, RingPicture, draw_ring, merge_links


def svg_text(path: Path) -> str:
    """The SVG document, checked well-formed (matplotlib draws text as glyphs, each string in a comment beside them)."""
    document = path.read_text()
    ET.fromstring(document)  # well-formed
    return document


def test_merge_keeps_one_link_per_pair_with_the_strongest_type() -> None:
    merged = merge_links([
        RingLink("a", "b", "long_distance"), RingLink("b", "a", "successor", relayed=True),
        RingLink("a", "c", "on_demand", up=False), RingLink("c", "a", "on_demand"), RingLink("a", "a", "successor"),
    ])  # fmt: skip
    by_pair = {frozenset((l.a, l.b)): l for l in merged}
    assert set(by_pair) == {frozenset("ab"), frozenset("ac")}
    assert by_pair[frozenset("ab")].type == "successor" and by_pair[frozenset("ab")].relayed
    assert by_pair[frozenset("ac")].type == "on_demand" and not by_pair[frozenset("ac")].up


def lab_topology() -> Topology:
    def both(a: str, b: str, kind: str, path: str = "direct", state: str = "up") -> list[LinkView]:
        return [LinkView(a, b, kind, state, "t", 1, path), LinkView(b, a, kind, state, "t", 1, path)]

    links = (
        both("node1", "node2", "successor") + both("node2", "node3", "successor", path="relay")
        + both("node3", "node4", "successor") + both("node4", "node1", "successor")
        + both("node1", "node3", "long_distance") + [LinkView("node2", "node4", "on_demand", "pending", None, None, None)]
    )  # fmt: skip
    return Topology(("node1", "node2", "node3", "node4"), tuple(links), {})


def test_lab_topology_becomes_a_ring_picture_with_relays_and_pending_links() -> None:
    picture = ring_picture(lab_topology(), "t")
    assert picture.nodes == ("node1", "node2", "node3", "node4")
    by_pair = {frozenset((l.a, l.b)): l for l in picture.links}
    assert len(by_pair) == 6
    assert by_pair[frozenset(("node2", "node3"))].relayed
    assert not by_pair[frozenset(("node1", "node2"))].relayed
    assert by_pair[frozenset(("node1", "node3"))].type == "long_distance"
    assert not by_pair[frozenset(("node2", "node4"))].up  # one end only, not up


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_draw_ring_writes_the_picture_with_a_legend(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"overlay{suffix}"
    draw_ring(ring_picture(lab_topology(), "lab t"), path)
    if suffix == ".png":
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return
    document = svg_text(path)
    for label in ("successor", "long-distance", "on-demand", "relayed (TURN)", "not up at both ends"):
        assert label in document


def test_draw_ring_refuses_what_it_cannot_draw(tmp_path: Path) -> None:
    with pytest.raises(PlotError, match="svg or .png"):
        draw_ring(RingPicture(("a", "b"), ()), tmp_path / "x.pdf")
    many = tuple(f"n{i}" for i in range(MAX_DRAWN_NODES + 1))
    with pytest.raises(PlotError, match="cannot be drawn"):
        draw_ring(RingPicture(many, ()), tmp_path / "x.svg")


def test_sim_svg_draws_the_simulated_overlay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sim.svg"
    assert main(["sim", "-n", "24", "--svg", str(path)]) == 0
    assert f"picture    {path}" in capsys.readouterr().out
    document = svg_text(path)
    assert "24 nodes in node id order" in document and "successor" in document
    with pytest.raises(SystemExit):
        main(["sim", "-n", str(MAX_DRAWN_NODES + 1), "--svg", str(path)])


def test_path_histograms(tmp_path: Path) -> None:
    path = tmp_path / "e7.svg"
    draw_path_histograms({"n = 16": {"lab": [1, 1, 2, 3], "sim": [1, 2, 2]}}, path, "E7", {"n = 16": "paper 2.0"})
    document = svg_text(path)
    assert "lab (mean 1.75, max 3)" in document and "sim (mean 1.67, max 2)" in document


def test_percentiles_and_shares() -> None:
    values = [400.0, 100.0, 300.0, 200.0]
    assert percentile(values, 0.0) == 100.0 and percentile(values, 1.0) == 400.0
    assert percentile(values, 0.5) == pytest.approx(250.0)
    assert share_at_least(values, 300.0) == 0.5 and share_at_least([], 1.0) == 0.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_cdfs(tmp_path: Path) -> None:
    path = tmp_path / "e6.svg"
    draw_cdfs({"off": [100.0, 200.0], "on": [300.0, 500.0, 700.0]}, path, "E6", "Mbit/s",
              marks=[(330.0, 20.0, "paper: 80 % above 330")])
    document = svg_text(path)
    assert "off (n = 2, median 150)" in document and "on (n = 3, median 500)" in document
    assert "paper: 80 % above 330" in document
    with pytest.raises(PlotError):
        draw_cdfs({"off": [1.0]}, tmp_path / "e6.pdf", "E6", "Mbit/s")
