"""review21w3 finding 4 (low): `evio pki ca|issue --force` writes the new private key into whatever is at the key's path,
in place: through a symbolic link, and into a file another user owns, which keeps its owner.

Attack (a local user, where the operator runs `evio pki ... --force` with `--out` in a directory that user can write
or already has a file in): `overlay_ca.write_private_key` opens the path with `O_WRONLY | O_CREAT | O_TRUNC` (no
`O_NOFOLLOW`, no `O_EXCL`, no new file) and `fchmod`s it 0600. A file the user placed there keeps its owner, so the
user reads the overlay CA's key (or a node's) after the operator "overwrote" it; a link placed there sends the key to
the file the link names. `evio/server/settings.py`'s `write_private` (a new file of a random name, renamed over)
exists for exactly this ("in a shared directory nobody can have placed a link or a file of theirs where it is
written", review of issue 21), and the server host's files use it; `evio pki` does not. `write_certificate`
(`Path.write_bytes`) follows links too.

Measured (as root, by hand): `ca.key` made by uid 65534 (0600) in the output directory; `evio pki ca --force`: the
file is then `-rw------- nobody nogroup` and holds the new CA key, which `nobody` reads. The test below shows the
link case, which needs no second user: the key lands in the file the link names.

Severity: low. It needs the operator's `--force` into a directory another user can write (or holds a file in), but
what leaks is the overlay CA's key: whoever holds it makes members. Suggested fix: `write_private_key` and
`write_certificate` through `write_private` (a new file, renamed over the old, which replaces a link or another
user's file instead of writing into it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evio.cli import main


@pytest.mark.xfail(strict=True, reason="review21w3 finding 4 (low): evio pki --force writes the key through a link "
                                       "(and into another user's file) at the key's path")
def test_a_forced_key_replaces_a_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "ca", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    stolen = elsewhere / "readable-by-the-user"
    stolen.write_text("")
    (out / "ca.key").symlink_to(stolen)
    assert main(["pki", "ca", "--name", "ov1 CA", "--out", str(out), "--force"]) == 0
    print(f"through the link: {len(stolen.read_bytes())} bytes of key in {stolen}")
    assert stolen.read_bytes() == b""
    assert not (out / "ca.key").is_symlink()


def test_a_new_key_without_force_is_written(tmp_path: Path) -> None:
    """The honest case: a new CA's key, in a directory of its own, 0600."""
    out = tmp_path / "ca"
    assert main(["pki", "ca", "--name", "ov1 CA", "--out", str(out)]) == 0
    assert (out / "ca.key").stat().st_mode & 0o777 == 0o600
    assert b"PRIVATE KEY" in (out / "ca.key").read_bytes()
