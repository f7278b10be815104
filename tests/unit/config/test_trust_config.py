"""overlays.<id>.trust: `evio pki`, the config check, and the node refusing a certificate its peers would refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evio.cli import main
from evio.config import ConfigError, loads_config
from evio.node.errors import NodeConfigError
from evio.node.plan import plan_node
from evio.tunnel.path.trust import named_node_ids

NODE = "ab" * 16
OTHER = "cd" * 16


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    assert main(["pki", "ca", "--name", "ov1 CA", "--out", str(tmp_path / "ca")]) == 0
    assert main(["pki", "issue", "--ca", str(tmp_path / "ca"), "--overlay", "ov1", "--node", NODE, "--out", str(tmp_path / "n1")]) == 0
    assert main(["pki", "issue", "--ca", str(tmp_path / "ca"), "--overlay", "ov1", "--node", OTHER, "--out", str(tmp_path / "n2")]) == 0
    return tmp_path


def document(trust: dict[str, str], node_id: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"overlays": {"ov1": {"signal": {"jid": "n1@overlay.test", "password": "pw"}, "trust": trust}}}
    if node_id:
        doc["node"] = {"id": node_id}
    return doc


def trust(ca: str = "ca/ca.crt", cert: str = "n1/node.crt", key: str = "n1/node.key") -> dict[str, str]:
    return {"ca_file": ca, "cert_file": cert, "key_file": key}


def problems(doc: dict[str, Any], base: Path) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        loads_config(json.dumps(doc), base)
    return {p.path: p.reason for p in caught.value.problems}


def test_pki_writes_keys_private_and_names_the_node(pki: Path) -> None:
    from cryptography import x509

    assert (pki / "ca" / "ca.key").stat().st_mode & 0o077 == 0
    assert (pki / "n1" / "node.key").stat().st_mode & 0o077 == 0
    cert = x509.load_pem_x509_certificate((pki / "n1" / "node.crt").read_bytes())
    assert named_node_ids(cert, "ov1") == [int(NODE, 16)]


def test_pki_refuses_to_overwrite_and_bad_ids(pki: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pki", "ca", "--name", "again", "--out", str(pki / "ca")]) == 1
    assert "pass --force" in capsys.readouterr().err
    assert main(["pki", "issue", "--ca", str(pki / "ca"), "--overlay", "ov1", "--node", "xyz", "--out", str(pki / "n3")]) == 1
    assert "32 hex digits" in capsys.readouterr().err


def test_trust_section_loads_with_paths_relative_to_the_config(pki: Path) -> None:
    config = loads_config(json.dumps(document(trust())), pki)
    section = config.overlays["ov1"].trust
    assert section is not None and section.cert_file == pki / "n1" / "node.crt"
    assert loads_config(json.dumps({"overlays": {"ov1": {"signal": {"jid": "n1@overlay.test", "password": "pw"}}}})).overlays["ov1"].trust is None


def test_trust_section_problems(pki: Path) -> None:
    assert problems(document({"ca_file": "ca/ca.crt"}), pki) == {
        "$.overlays.ov1.trust.cert_file": "required key is missing",
        "$.overlays.ov1.trust.key_file": "required key is missing",
    }
    found = problems(document(trust(key="n2/node.key")), pki)
    assert found == {"$.overlays.ov1.trust.key_file": f"{pki}/n2/node.key: not the key of {pki}/n1/node.crt"}
    found = problems(document(trust(ca="n1/node.crt")), pki)
    assert list(found) == ["$.overlays.ov1.trust.ca_file"] and "not a CA" in found["$.overlays.ov1.trust.ca_file"]
    found = problems(document(trust(cert="missing.crt")), pki)
    assert found == {"$.overlays.ov1.trust.cert_file": f"{pki}/missing.crt: no such file"}


def test_node_refuses_to_start_with_a_certificate_for_another_node(pki: Path) -> None:
    config = loads_config(json.dumps(document(trust())), pki)
    plan = plan_node(config, int(NODE, 16), controller_port=1, kernel_module_loaded=False)
    (overlay,) = plan.overlays
    assert overlay.tunnel.trust is not None and overlay.certificate is not None
    with pytest.raises(NodeConfigError, match=f"peers would refuse it: names {NODE} for overlay ov1, not the claimed {OTHER}"):
        plan_node(config, int(OTHER, 16), controller_port=1, kernel_module_loaded=False)


def test_node_without_trust_uses_its_own_certificate(pki: Path) -> None:
    config = loads_config(json.dumps({"overlays": {"ov1": {"signal": {"jid": "n1@overlay.test", "password": "pw"}}}}))
    (overlay,) = plan_node(config, int(NODE, 16), controller_port=1, kernel_module_loaded=False).overlays
    assert overlay.tunnel.trust is None and overlay.certificate is None
