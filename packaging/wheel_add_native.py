"""Turns evio's pure wheel into a platform wheel with the ``evio_native`` extension beside ``evio``.

    python3 packaging/wheel_add_native.py PURE_WHEEL EXTENSION OUT_DIR

setuptools builds ``evio`` (with its package data) as it does for every developer install, and
scripts/build-native builds the extension with cargo; this adds the extension at the root of the
wheel (it is imported as the top-level module ``evio_native``), marks the wheel as not pure
(``Root-Is-Purelib: false``, so installers put it in platlib), tags it ``cp311-abi3-<platform>``
(the crate is built against PyO3's abi3-py311: one build for CPython 3.11 and later) and writes
RECORD anew with the hashes (PEP 376/427). Prints the new wheel's path.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import sysconfig
import zipfile
from pathlib import Path

PYTHON_TAG = "cp311"
ABI_TAG = "abi3"


def platform_tag() -> str:
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def retag_wheel_metadata(text: str, tag: str) -> str:
    """The WHEEL file with purelib false and the one tag this wheel has."""
    lines = [line for line in text.splitlines() if not line.startswith(("Root-Is-Purelib:", "Tag:"))]
    return "\n".join([*lines, "Root-Is-Purelib: false", f"Tag: {tag}"]) + "\n"


def add_native(pure: Path, extension: Path, out_dir: Path) -> Path:
    name, version = pure.name.split("-")[:2]
    tag = f"{PYTHON_TAG}-{ABI_TAG}-{platform_tag()}"
    target = out_dir / f"{name}-{version}-{tag}.whl"
    dist_info = f"{name}-{version}.dist-info"
    entries: list[tuple[str, bytes]] = []
    with zipfile.ZipFile(pure) as source:
        for info in source.infolist():
            if info.filename == f"{dist_info}/RECORD":
                continue
            data = source.read(info)
            if info.filename == f"{dist_info}/WHEEL":
                data = retag_wheel_metadata(data.decode(), tag).encode()
            entries.append((info.filename, data))
    entries.insert(0, (f"evio_native.{ABI_TAG}.so", extension.read_bytes()))
    record = "".join(f"{path},{record_hash(data)},{len(data)}\n" for path, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    partial = target.with_name(target.name + ".part")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            # rw-r--r--, rwxr-xr-x for the shared object, as pip would leave them.
            info.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            wheel.writestr(info, data)
        wheel.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0)), record)
    partial.replace(target)
    return target


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: wheel_add_native.py PURE_WHEEL EXTENSION OUT_DIR", file=sys.stderr)
        return 2
    pure, extension, out_dir = (Path(arg) for arg in argv)
    print(add_native(pure, extension, out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
