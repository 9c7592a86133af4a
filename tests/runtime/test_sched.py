"""Tests for autotune.runtime.sched: a thread's CPU time, and its time queued for a CPU,
as the kernel counts them, with real processes holding the CPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from autotune.runtime import sched

counted = pytest.mark.skipif(not sched.COUNTED, reason="this kernel does not count run queues")


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@counted
def test_a_thread_that_computes_beside_a_neighbour_is_queued_for_part_of_its_wall(
    neighbours,
) -> None:
    wall, before = time.perf_counter(), sched.thread_times()
    spin(0.2)
    used, wall = sched.thread_times() - before, time.perf_counter() - wall
    assert used.ran_s == pytest.approx(0.2, abs=0.02)
    # one CPU each for the neighbours and this thread, at most: it waited for one a while
    assert used.queued_s > 0.05
    assert used.ran_s + used.queued_s <= wall + 0.01


@counted
def test_a_thread_that_sleeps_is_neither_running_nor_queued() -> None:
    wall, before = time.perf_counter(), sched.thread_times()
    for _ in range(5):
        time.sleep(0.04)
    used, wall = sched.thread_times() - before, time.perf_counter() - wall
    assert used.ran_s + used.queued_s < wall / 2  # asleep, as a read from slow storage


def test_a_process_s_times_are_read_while_it_lives_and_a_gone_one_raises(neighbours) -> None:
    child = neighbours[0]
    wall = time.perf_counter()
    first = sched.process_times(child.pid)
    time.sleep(0.2)
    later = sched.process_times(child.pid) - first
    wall = time.perf_counter() - wall  # the sleep and what this process waited to wake
    assert later.ran_s > 0  # it spun on a CPU in between
    # one thread: no more than its wall, but for the wait it was in at the first read, which
    # the kernel charges whole as it ends (a slice or a few of the spinners beside it)
    assert later.ran_s + later.queued_s <= wall + 0.05
    child.kill()
    child.wait()
    with pytest.raises(psutil.Error):
        sched.process_times(child.pid)


# a child that spins 3 ms of its own CPU time for each line it reads, and says so
_SPIN_ON_ASK = """
import sys, time
for _ in sys.stdin:
    end = time.thread_time() + 0.003
    while time.thread_time() < end:
        pass
    print("spun", flush=True)
"""


def test_a_process_s_cpu_time_is_read_finer_than_the_kernel_s_10_ms_ticks() -> None:
    """A worker that sleeps in its reads uses a few milliseconds of CPU in a span: read in
    whole ticks, that is 0 or 10 ms."""
    child = subprocess.Popen(
        [sys.executable, "-c", _SPIN_ON_ASK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    try:
        spans = []
        for _ in range(4):  # the first span: its start too (an interpreter's)
            before = sched.process_times(child.pid)
            child.stdin.write("spin\n")
            child.stdin.flush()
            assert child.stdout.readline() == "spun\n"
            spans.append((sched.process_times(child.pid) - before).ran_s)
        # its 3 ms, and the little it takes to read a line and write one
        assert all(0.003 <= ran < 0.005 for ran in spans[1:]), spans
    finally:
        child.kill()
        child.wait()


def test_where_the_kernel_does_not_count_cpu_time_comes_from_the_process_clocks(
    monkeypatch,
) -> None:
    monkeypatch.setattr(sched, "COUNTED", False)
    before = sched.thread_times()
    spin(0.05)
    assert (sched.thread_times() - before).ran_s == pytest.approx(0.05, abs=0.01)
    assert sched.thread_times().queued_s == sched.process_times(os.getpid()).queued_s == 0.0
