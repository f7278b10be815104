"""Versions read from a dist-info directory's name, as importlib.metadata reads them."""

import importlib.metadata
import sys
from pathlib import Path

import pytest

from evio.deferred_modules import InstalledVersionInfo, installed_version, version_info


@pytest.mark.parametrize("distribution", ["slixmpp", "os-ken", "os_ken", "cryptography", "pyOpenSSL", "aioice"])
def test_the_version_is_importlib_metadatas(distribution: str) -> None:
    assert installed_version(distribution) == importlib.metadata.version(distribution)


def test_a_distribution_without_a_dist_info_directory_is_asked_of_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    egg = tmp_path / "some_lib.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: some-lib\nVersion: 7.1\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert installed_version("some-lib") == "7.1"
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        installed_version("no-such-lib")


def test_the_first_dist_info_on_the_path_wins_as_for_an_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for where, version in (("a", "2.0.1"), ("b", "1.0")):
        (tmp_path / where / f"Some.Lib-{version}.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(tmp_path / "a"), str(tmp_path / "b")])
    assert installed_version("some-lib") == "2.0.1"
    assert str(InstalledVersionInfo("some_lib")) == "2.0.1"


def test_version_info_is_slixmpps() -> None:
    assert version_info("1.17.0") == (1, 17, 0)
    assert version_info("1.17") == (0, 0, 0)
    assert version_info("1.17.0rc1") == (0, 0, 0)
    assert version_info("1.17.0.post1") == (1, 17, 0)


def test_what_else_pbrs_version_info_offers_is_pbrs() -> None:
    assert InstalledVersionInfo("os-ken").release_string() == importlib.metadata.version("os-ken")


def test_an_egg_first_on_the_path_is_asked_of_importlib_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    egg = tmp_path / "a" / "some_lib-3.0-py3.11.egg-info"
    egg.mkdir(parents=True)
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: some-lib\nVersion: 3.0\n")
    (tmp_path / "b" / "some_lib-1.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "a"), str(tmp_path / "b")])
    assert installed_version("some-lib") == "3.0"
