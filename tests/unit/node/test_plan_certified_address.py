"""The plan tells the bridge whether the overlay CA's certificate names its overlay address (decisions 0062,
0076): a certified IPv6 address is added without duplicate address detection (review21n N3)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import replace
from pathlib import Path

import pytest

from evio.config.model import TrustConfig
from evio.node.plan import plan_node
from evio.testing.node_fleet import fleet_config, nid
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca, write_certificate, write_private_key

ADDRESS = ipaddress.IPv6Interface("fd00:77::1/64")


@pytest.mark.parametrize(("named", "certified"), [(ADDRESS.ip, True), (ipaddress.IPv6Address("fd00:77::9"), False),
                                                  (None, False)])
def test_the_bridge_knows_whether_its_address_is_certified(
    tmp_path: Path, named: ipaddress.IPv6Address | None, certified: bool,
) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = make_overlay_ca("ov1 CA", now, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], nid(1), now, 30,
                                       addresses={"ov1": [named]} if named is not None else None)
    write_certificate(tmp_path / "ca.crt", ca_cert)
    write_certificate(tmp_path / "node.crt", cert)
    write_private_key(tmp_path / "node.key", key)
    config = fleet_config(1)
    ov = config.overlays["ov1"]
    ov = replace(ov, bridge=replace(ov.bridge, address=ADDRESS),
                 trust=TrustConfig(tmp_path / "ca.crt", tmp_path / "node.crt", tmp_path / "node.key"))
    plan = plan_node(replace(config, overlays={"ov1": ov}), nid(1), controller_port=6653, kernel_module_loaded=False)
    bridge = plan.overlays[0].bridge
    assert bridge.address_certified is certified
    assert bridge.address_flags == (("nodad",) if certified else ())


def test_without_trust_no_address_is_certified() -> None:
    config = fleet_config(1)
    ov = config.overlays["ov1"]
    ov = replace(ov, bridge=replace(ov.bridge, address=ADDRESS))
    plan = plan_node(replace(config, overlays={"ov1": ov}), nid(1), controller_port=6653, kernel_module_loaded=False)
    assert not plan.overlays[0].bridge.address_certified
