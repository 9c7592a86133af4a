"""The kernel's page cache for a set of files: evict them, warm them, ask what is resident,
time reading them as they are cached now.

Used by ``mode=diagnose`` to time the same loader from storage and from memory. Eviction uses
``posix_fadvise(DONTNEED)``, which drops a file's clean cached pages without root; whether it
worked is checked with ``mincore(2)`` (a file system such as tmpfs keeps its pages: the pages
are the file).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import time
from collections.abc import Iterable, Sequence

from autotune.runtime.stages import StageTime

_PROT_READ = 0x1
_MAP_SHARED = 0x01
_MAP_FAILED = ctypes.c_void_p(-1).value


def evict(paths: Iterable[str], *, flush: bool = False) -> bool:
    """Asks the kernel to drop the cached pages of ``paths``; False where it cannot.

    Only clean pages go: a file written moments ago (a freshly generated dataset) keeps its
    dirty pages until they reach the disk, which ``flush`` (``sync(2)``, machine-wide) forces
    first.
    """
    if not hasattr(os, "posix_fadvise"):
        return False
    if flush:
        os.sync()
    for path in paths:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return True


def warm(paths: Iterable[str]) -> int:
    """Reads ``paths`` once so that their pages are cached; returns the bytes read."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError), open(path, "rb") as f:
            total += len(f.read())
    return total


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return libc


def resident_fraction(paths: Iterable[str]) -> float | None:
    """Share of the pages of ``paths`` that are in the page cache (``mincore``), or None where
    it cannot be asked (not Linux, no libc)."""
    try:
        libc = _libc()
    except (OSError, AttributeError):
        return None
    if libc is None:
        return None
    resident = pages = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                continue
            addr = libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
            if addr in (None, _MAP_FAILED):
                return None
            try:
                n = -(-size // mmap.PAGESIZE)
                vec = ctypes.create_string_buffer(n)
                if libc.mincore(addr, size, vec) != 0:
                    return None
                resident += sum(b & 1 for b in vec.raw)
                pages += n
            finally:
                libc.munmap(addr, size)
        finally:
            os.close(fd)
    return resident / pages if pages else None


def time_reads(paths: Sequence[str]) -> StageTime:
    """Seconds per file to read ``paths`` as they are cached now (cold after an eviction)."""
    cpu, wall = time.thread_time(), time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            f.read()
    n = max(1, len(paths))
    return StageTime((time.thread_time() - cpu) / n, (time.perf_counter() - wall) / n)


def total_bytes(paths: Sequence[str]) -> int:
    return sum(os.stat(p).st_size for p in paths)
