"""How long a thread ran on a CPU, and how long it was ready to run and waited for one, as
Linux's scheduler counts them (``/proc/<pid>/task/<tid>/schedstat``: nanoseconds on a CPU,
nanoseconds runnable in a run queue, time slices).

The second tells two kinds of wall time apart that CPU time alone cannot: a sample that
waits on storage sleeps (neither count grows), one that waits for a CPU another process
holds (a neighbour's job, more workers than cores) is queued. A neighbour's load stretches a
sample's wall time as slow storage does; only the run-queue delay says which it was.

Where the kernel does not count them (no ``/proc``, no ``CONFIG_SCHED_INFO``), the CPU time
comes from the process's own clocks and nothing is said to have queued.

Another process's CPU time is read from its CPU-time clock (``clock_getcpuclockid``: in
nanoseconds, its threads that ended too), not from ``/proc/<pid>/stat``, which counts in
clock ticks of 10 ms: a worker that sleeps in its reads uses a few milliseconds in a span
of tens, and whole ticks would read it as 0 or as twice its use.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass

import psutil

NS = 1e-9


@dataclass(frozen=True)
class CpuTimes:
    """Seconds on a CPU, and seconds runnable but waiting for one."""

    ran_s: float
    queued_s: float

    def __add__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.ran_s + other.ran_s, self.queued_s + other.queued_s)

    def __sub__(self, earlier: CpuTimes) -> CpuTimes:
        return CpuTimes(self.ran_s - earlier.ran_s, self.queued_s - earlier.queued_s)


ZERO = CpuTimes(0.0, 0.0)


def _read(path: str) -> CpuTimes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        ran, queued, *_ = os.read(fd, 128).split()
        return CpuTimes(int(ran) * NS, int(queued) * NS)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


COUNTED = _read("/proc/thread-self/schedstat") is not None  # this kernel counts them
# another process's CPU-time clock, where the C library gives one (glibc, musl: not macOS)
_getcpuclockid = (
    getattr(ctypes.CDLL(None), "clock_getcpuclockid", None) if os.name == "posix" else None
)


def thread_times() -> CpuTimes:
    """The calling thread's (2-3 µs: read at every batch without workers)."""
    counted = _read("/proc/thread-self/schedstat") if COUNTED else None
    return counted or CpuTimes(time.thread_time(), 0.0)


def _cpu_clock(pid: int) -> int | None:
    """The id of process ``pid``'s CPU-time clock; None where this C library has none."""
    clock = ctypes.c_int()
    if _getcpuclockid is None or _getcpuclockid(pid, ctypes.byref(clock)) != 0:
        return None
    return clock.value


def _process_cpu_s(pid: int) -> float:
    """Process ``pid``'s CPU seconds, its threads' that ended too (``psutil.Error``: gone)."""
    clock = _cpu_clock(pid)
    if clock is None:  # no such clock here: the kernel's ticks
        return sum(psutil.Process(pid).cpu_times()[:2])
    try:
        return time.clock_gettime(clock)
    except OSError as exc:  # the process is gone (its clock with it)
        raise psutil.NoSuchProcess(pid) from exc


def process_times(pid: int) -> CpuTimes:
    """The process's CPU seconds (its threads' that ended too), and the seconds its threads
    alive now were queued for a CPU (a worker's: its reading thread and the one that sends
    its batches; a thread that ends takes its own out). Raises ``psutil.Error`` where the
    process is gone."""
    ran = _process_cpu_s(pid)
    if not COUNTED:
        return CpuTimes(ran, 0.0)
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError as exc:
        raise psutil.NoSuchProcess(pid) from exc
    each = (_read(f"/proc/{pid}/task/{tid}/schedstat") for tid in tids)
    return CpuTimes(ran, sum(t.queued_s for t in each if t is not None))
