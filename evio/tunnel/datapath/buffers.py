"""Data path buffers whose memory is taken when written, not when made.

A tunnel's rings are sized for a burst at full rate (a GRO receive ring is 16
slots of 64 KiB, a send ring 64 records), but an idle tunnel (liveness
records, the odd ping) writes one page of one slot. A ``bytearray`` is zeroed
when made, so all of it is resident from the start: about 2.7 MB per tunnel
before this module, a third of an idle daemon at a dozen tunnels. An
anonymous mapping reads as zeros without a page behind it until a page is
first written, so a ring costs what its traffic has touched; ``release`` hands
the pages back (a stopped data path), and the mapping itself goes when the
last view of it does, not into the C heap where a freed megabyte stays.
Small buffers are not worth a mapping (a kernel area and a whole page each).
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any

LAZY_MIN = 16 * 1024
"""Buffers of at least this many bytes are mappings; smaller ones are bytearrays."""


def zeroed(size: int) -> bytearray | mmap.mmap:
    """A writable, zero-filled buffer of ``size`` bytes; from ``LAZY_MIN`` on, resident only where written."""
    if size < LAZY_MIN:
        return bytearray(size)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def release(buffer: bytearray | mmap.mmap | None) -> None:
    """Give a mapping's written pages back to the kernel; it stays usable and reads as zeros again.
    A bytearray is left alone: it goes with its last reference."""
    if isinstance(buffer, mmap.mmap):
        buffer.madvise(mmap.MADV_DONTNEED)


def resident(buffer: bytearray | mmap.mmap) -> int:
    """Bytes of ``buffer`` in memory: a bytearray's length; a mapping's written pages (mincore(2)),
    or its length where mincore cannot be called."""
    if not isinstance(buffer, mmap.mmap):
        return len(buffer)
    pages = -(-len(buffer) // mmap.PAGESIZE)
    flags = (ctypes.c_ubyte * pages)()
    anchor = ctypes.c_char.from_buffer(buffer)  # the mapping's address (mmap objects are page-aligned)
    try:
        failed = _mincore(ctypes.addressof(anchor), len(buffer), flags) if _mincore is not None else -1
    finally:
        del anchor  # an exported buffer would keep the mapping from being closed
    if failed:
        return len(buffer)
    return sum(flag & 1 for flag in flags) * mmap.PAGESIZE


def _load_mincore() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


_mincore = _load_mincore()
