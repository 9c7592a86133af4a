"""Trials in a child process survive real faults: crashes, hangs, memory limits."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest
from faulty import HangInWorker, SegfaultInWorker, as_
from helpers import BRIEF_WINDOW

from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import synthetic
from autotune.runtime import trial
from autotune.runtime.job import TrialJob
from autotune.runtime.trial import run_trial
from autotune.schema import ModelConfig, RecipeConfig


@pytest.fixture(scope="module")
def source():
    return synthetic(count=24, num_classes=2)


def job(
    source, *, model="tiny", target=None, workers=0, batch_size=4, crop=32, device="cpu", **kwargs
):
    pipeline = PipelineConfig(
        batch_size=batch_size, num_workers=workers, prefetch_factor=2 if workers else None
    )
    return TrialJob(
        pipeline=pipeline,
        source=source,
        model=ModelConfig(name=model, _target_=target),
        recipe=RecipeConfig(crop_size=crop),
        window=BRIEF_WINDOW,
        device=device,
        **kwargs,
    )


_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _snapshot_processes():
    """Leftovers are judged against what ran before each test, not before the module."""
    _BEFORE.clear()
    _BEFORE.update(p.pid for p in psutil.process_iter())


def _leftovers() -> list[psutil.Process]:
    """Trial processes started since the test began that are still alive: trial children and
    their DataLoader workers (forked from the fork server, they carry its command line, even
    when orphaned), not the fork server itself, and not unrelated processes on the machine."""
    left = []
    for proc in psutil.process_iter(["cmdline", "status", "ppid"]):
        if proc.pid in _BEFORE or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = " ".join(proc.info["cmdline"] or ())
        if "forkserver" in cmdline and proc.info["ppid"] != os.getpid() and _ours(proc):
            left.append(proc)
    return left


def _ours(proc: psutil.Process) -> bool:
    """Started under this test process: under pytest-xdist, a sibling worker's trials are
    not this one's leftovers (the worker's name is in every descendant's environment)."""
    try:
        return proc.environ().get("PYTEST_XDIST_WORKER") == os.environ.get("PYTEST_XDIST_WORKER")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _no_leftovers() -> None:
    """Nothing the trial started is still alive: no child, no orphaned DataLoader worker."""
    deadline = time.monotonic() + 5
    while _leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _leftovers(), _leftovers()


@pytest.mark.slow
def test_a_healthy_trial_measures(source):
    outcome = run_trial(job(source, workers=2), timeout_s=60)
    assert outcome.status == "ok", outcome.failure
    assert outcome.measurement.samples_per_s > 0
    assert outcome.peak_memory_bytes > 10 * 2**20  # the whole tree: child and its workers
    _no_leftovers()


@pytest.mark.slow
def test_worker_segfault_is_worker_died(source):
    outcome = run_trial(job(as_(SegfaultInWorker, source), workers=2), timeout_s=60)
    assert outcome.status == "failed"
    assert outcome.failure.kind == "worker_died", outcome.failure
    assert "DataLoader worker" in outcome.failure.message
    _no_leftovers()


@pytest.mark.slow
def test_hanging_worker_is_a_timeout_and_is_reaped(source):
    outcome = run_trial(job(as_(HangInWorker, source), workers=2), timeout_s=6)
    assert outcome.status == "failed" and outcome.failure.kind == "timeout"
    assert 5 <= outcome.wall_s < 30
    _no_leftovers()


@pytest.mark.slow
def test_training_process_segfault_does_not_take_the_parent_down(source):
    outcome = run_trial(job(source, target="faulty.Segfaults"), timeout_s=60)
    assert outcome.status == "failed" and outcome.failure.kind == "error"
    assert "SIGSEGV" in outcome.failure.message
    _no_leftovers()


@pytest.mark.slow
def test_memory_limit_is_host_oom(source):
    # resnet18 at 224 px, batch 32, needs ~1 GiB of activations: far over a 128 MiB cap
    heavy = job(source, model="resnet18", batch_size=32, crop=224, memory_limit_bytes=128 * 2**20)
    outcome = run_trial(heavy, timeout_s=120)
    assert outcome.status == "failed" and outcome.failure.kind == "host_oom", outcome.failure
    assert "lower" in outcome.failure.hint
    _no_leftovers()


@pytest.mark.slow
def test_sigkill_of_the_trial_process_is_host_oom(source):
    def kill_child_at_first_sub_window(index: int, value: float) -> bool:
        (child,) = [p for p in _leftovers() if p.pid == os.getpgid(p.pid)]  # a group leader
        os.kill(child.pid, signal.SIGKILL)  # what the kernel's OOM killer does
        return False

    outcome = run_trial(job(source), timeout_s=60, should_prune=kill_child_at_first_sub_window)
    assert outcome.status == "failed" and outcome.failure.kind == "host_oom"
    _no_leftovers()


@pytest.mark.slow
def test_pruning_stops_the_window(source):
    outcome = run_trial(job(source), timeout_s=60, should_prune=lambda i, v: True)
    assert outcome.status == "pruned" and outcome.pruned_at == 0
    assert len(outcome.intermediate) == 1


def test_a_child_stopped_before_it_has_a_group_of_its_own_is_killed_alone() -> None:
    """A stop in the trial's first instant finds the child not yet in a process group of its
    own (nor with workers): it is killed by itself, not left to run on."""
    early = subprocess.Popen(["sleep", "60"])  # in this process's group, as the child is then
    with pytest.raises(ProcessLookupError):
        os.killpg(early.pid, 0)  # no group of its own to kill
    trial._kill_group(early.pid, reaped=False)
    assert early.wait(timeout=10) == -signal.SIGKILL
    # a child already reaped: its pid may be another process's now, which is left alone
    other = subprocess.Popen(["sleep", "60"])
    trial._kill_group(other.pid, reaped=True)
    assert other.poll() is None
    other.kill()
    other.wait()
