"""One measurement in a fresh child process: isolation, timeout, memory, failure kinds.

A trial must not poison the next: leaked workers, a fragmented allocator, a crashed worker or
an out-of-memory kill stay in the child. Children come from a fork server that imported torch
once and never ran it: a fork is cheap, and safe even when the calling process has run torch
(a child forked from a process whose OpenMP pool was used can hang) or initialized CUDA. Each
child leads its own process group, so a timeout or Ctrl-C takes it down together with its
DataLoader workers.

The child and this process talk over a pipe: the child sends ``("sub_window", index, value)``
after each sub-window and waits for ``"prune"`` or ``"go"``, then ends with ``("done",
measurement)``, ``("pruned", index)`` or ``("failed", kind, message, traceback)``.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import resource
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import psutil

from autotune.runtime import fork_server
from autotune.runtime.child import measure
from autotune.runtime.epochs import EpochTimes
from autotune.runtime.failures import Failure, FailureKind, classify_signal, reported
from autotune.runtime.job import TrialJob
from autotune.runtime.measurement import Measurement
from autotune.runtime.ranks import measure_ranks
from autotune.runtime.window import WindowStopped

log = logging.getLogger(__name__)

MEMORY_SAMPLE_INTERVAL_S = 0.25
GRACEFUL_EXIT_S = 10.0


@dataclass(frozen=True)
class TrialOutcome:
    status: Literal["ok", "pruned", "failed"]
    measurement: Measurement | EpochTimes | None = None  # EpochTimes for an epochs job
    failure: Failure | None = None
    peak_memory_bytes: int | None = None
    pruned_at: int | None = None
    wall_s: float = 0.0
    intermediate: tuple[float, ...] = field(default_factory=tuple)


def run_trial(
    job: TrialJob,
    *,
    timeout_s: float,
    should_prune: Callable[[int, float], bool] = lambda index, value: False,
    stop: threading.Event | None = None,
) -> TrialOutcome:
    """Runs ``job`` in a fresh child process and returns what happened, whatever happened.

    ``should_prune(index, rate so far)`` is asked where the window has evidence and more to
    time (``run_window``'s ``on_sub_window``; in this process, so it may talk to Optuna's
    storage). Setting ``stop`` (Ctrl-C) ends the trial at once.
    """
    ctx = fork_server.context()
    parent_conn, child_conn = ctx.Pipe()
    # not a daemon: a daemonic process may not start DataLoader workers
    child = ctx.Process(target=_child, args=(job, child_conn))
    start = time.monotonic()
    child.start()
    child_conn.close()
    seen = _Seen()
    outcome: TrialOutcome | None = None
    try:
        outcome = _supervise(child, parent_conn, start, timeout_s, should_prune, stop, seen)
    finally:
        _end(child, parent_conn, outcome)
    return TrialOutcome(
        outcome.status,
        measurement=outcome.measurement,
        failure=outcome.failure,
        peak_memory_bytes=seen.peak or None,
        pruned_at=outcome.pruned_at,
        wall_s=time.monotonic() - start,
        intermediate=tuple(seen.intermediate),
    )


def _child(job: TrialJob, conn: Any) -> None:
    """The child process: set apart from the caller, then measures and says how it went."""
    os.setpgrp()  # own group: Ctrl-C reaches the parent only; killpg reaps workers too
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if job.memory_limit_bytes:
        _limit_memory(job.memory_limit_bytes)
    multiprocessing.set_start_method(job.worker_start_method, force=True)
    # more workers than CPUs is a point the search means to measure, not a mistake to warn of
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)

    def report(index: int, value: float) -> None:
        conn.send(("sub_window", index, value))
        if conn.recv() == "prune":
            raise WindowStopped(index)

    try:
        several = job.ranks > 1 and job.kind != "epochs"  # real epochs: one process
        measurement = (measure_ranks if several else measure)(job, report)
        conn.send(("done", measurement))
    except WindowStopped as stop:
        conn.send(("pruned", stop.args[0]))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, then the child ends
        conn.send(("failed", *reported(exc)))


def _limit_memory(extra_bytes: int) -> None:
    """Caps this process's data segment (heap and private mappings) at what it has now plus
    ``extra_bytes``; its DataLoader workers inherit the cap. Allocations past it fail."""
    with open("/proc/self/status") as status:
        held_kb = next(int(line.split()[1]) for line in status if line.startswith("VmData:"))
    limit = held_kb * 1024 + extra_bytes
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


@dataclass
class _Seen:
    """What the parent saw of a running trial besides its outcome."""

    peak: int = 0  # the most memory the child and its workers held at one sample
    intermediate: list[float] = field(default_factory=list)  # rates so far, as reported


def _supervise(
    child: multiprocessing.process.BaseProcess,
    conn: Any,
    start: float,
    timeout_s: float,
    should_prune: Callable[[int, float], bool],
    stop: threading.Event | None,
    seen: _Seen,
) -> TrialOutcome:
    """Waits for the child's outcome, sampling its memory, until it ends, runs past
    ``timeout_s`` or ``stop`` is set."""
    next_sample = start
    while True:
        now = time.monotonic()
        if now >= next_sample:
            seen.peak = max(seen.peak, _tree_memory(child.pid))
            next_sample = now + MEMORY_SAMPLE_INTERVAL_S
        if stop is not None and stop.is_set():
            return TrialOutcome(
                "failed", failure=Failure(FailureKind.INTERRUPTED, "stopped (Ctrl-C or SIGTERM)")
            )
        if now - start > timeout_s:
            return TrialOutcome(
                "failed",
                failure=Failure(FailureKind.TIMEOUT, f"no result after {timeout_s:.0f} s"),
            )
        if conn.poll(MEMORY_SAMPLE_INTERVAL_S):
            outcome = _receive(child, conn, should_prune, seen)
            if outcome is not None:
                return outcome
        elif not child.is_alive():
            if stop is not None and stop.is_set():
                continue  # a stop sent to every process (a scheduler's) ended it: interrupted
            return _death(child.exitcode)


def _receive(
    child: multiprocessing.process.BaseProcess,
    conn: Any,
    should_prune: Callable[[int, float], bool],
    seen: _Seen,
) -> TrialOutcome | None:
    """Handles one message of the child: its outcome, or None after a sub-window."""
    try:
        message = conn.recv()
    except (EOFError, OSError):  # the child died mid-message
        message = None
    if message is None:
        child.join(5)
        return _death(child.exitcode)
    if message[0] == "sub_window":
        _, index, value = message
        seen.intermediate.append(value)
        with contextlib.suppress(OSError):  # a dead child is noticed next turn
            conn.send("prune" if should_prune(index, value) else "go")
        return None
    if message[0] == "done":
        return TrialOutcome("ok", measurement=message[1])
    if message[0] == "pruned":
        return TrialOutcome("pruned", pruned_at=message[1])
    _, kind, text, detail = message
    if detail:
        log.debug("trial failed:\n%s", detail)
    return TrialOutcome("failed", failure=Failure(kind, text))


def _end(
    child: multiprocessing.process.BaseProcess, conn: Any, outcome: TrialOutcome | None
) -> None:
    """Takes the child down with its whole process group, after a grace period for a child
    that reported (it shuts its workers down itself)."""
    reported = outcome is not None and (
        outcome.failure is None
        or outcome.failure.kind not in (FailureKind.TIMEOUT, FailureKind.INTERRUPTED)
    )
    if reported:
        child.join(GRACEFUL_EXIT_S)
    # then nothing of the trial survives it, workers included
    _kill_group(child.pid, reaped=child.exitcode is not None)
    child.join(10)
    conn.close()


def _tree_memory(pid: int) -> int:
    """Proportional set size of a process and its descendants (RSS where PSS is unknown)."""
    total = 0
    try:
        root = psutil.Process(pid)
        for proc in (root, *root.children(recursive=True)):
            try:
                info = proc.memory_full_info()
                total += getattr(info, "pss", info.rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    except psutil.NoSuchProcess:
        pass
    return total


def _kill_group(pid: int, *, reaped: bool) -> None:
    """Kills the child's process group; a child stopped so early that it has no group of its
    own yet (nor workers) is killed alone, unless it was reaped (its pid may be another's)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if not reaped:  # unreaped, the pid is still the child's, even once it has ended
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _death(exitcode: int | None) -> TrialOutcome:
    """The outcome of a child that ended without saying how."""
    if exitcode is not None and exitcode < 0:
        return TrialOutcome("failed", failure=classify_signal(-exitcode))
    return TrialOutcome(
        "failed", failure=Failure(FailureKind.ERROR, f"trial process exited with code {exitcode}")
    )
