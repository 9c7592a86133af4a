"""One measurement in a fresh child process: isolation, timeout, memory, failure kinds.

A trial must not poison the next (DESIGN §3 rule 6): leaked workers, a fragmented allocator,
a crashed worker or an out-of-memory kill stay in the child. Children come from a fork server
that imported torch once and never ran it: a fork is cheap, and safe even when the calling
process has run torch (a child forked from a process whose OpenMP pool was used can hang) or
initialized CUDA. Each child leads its own process group, so a timeout or Ctrl-C takes it
down together with its DataLoader workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import psutil

from autotune.errors import UsageError
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.runtime.gpu_monitor import UtilizationSampler, open_sampler
from autotune.runtime.window import (
    Measurement,
    WindowStopped,
    run_ceiling,
    run_window,
    warmup_batches,
)
from autotune.schema import ModelConfig, RecipeConfig, WindowConfig

log = logging.getLogger(__name__)

MEMORY_SAMPLE_INTERVAL_S = 0.25
GRACEFUL_EXIT_S = 10.0
ENDLESS = 10**9  # samples: the window stops the loader long before

HINTS = {
    "cuda_oom": "lower batch_size, or exclude this config with study.memory_budget_gb",
    "host_oom": "lower num_workers x prefetch_factor or batch_size; check free RAM",
    "shm_exhausted": "raise --shm-size (docker) or lower num_workers x prefetch_factor",
    "worker_died": "a DataLoader worker crashed: run the config with num_workers=0 to see why",
    "timeout": "the trial ran past study.trial_timeout: raise it, or the config hangs",
    "corrupt_data": "remove or fix the unreadable files named in the message",
    "invalid_config": "fix the search space so that it only yields valid settings",
    "interrupted": "stopped by Ctrl-C: run the same command again to resume the study",
    "error": "see the message; AUTOTUNE_DEBUG=1 logs the trial's traceback",
}


@dataclass(frozen=True)
class Failure:
    kind: str
    message: str

    @property
    def hint(self) -> str:
        return HINTS.get(self.kind, HINTS["error"])

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class TrialJob:
    """Everything one measurement needs (pickled to the child)."""

    pipeline: PipelineConfig
    source: Source
    model: ModelConfig
    recipe: RecipeConfig
    window: WindowConfig
    device: str
    seed: int = 0
    kind: Literal["window", "ceiling"] = "window"
    memory_limit_bytes: int | None = None  # per process, beyond what it holds at start
    # how DataLoader workers start: the default of the process that asked for the trial,
    # which is what the user's training script gets (not the fork server's)
    worker_start_method: str = field(default_factory=lambda: multiprocessing.get_start_method())


@dataclass(frozen=True)
class TrialOutcome:
    status: Literal["ok", "pruned", "failed"]
    measurement: Measurement | None = None
    failure: Failure | None = None
    peak_memory_bytes: int | None = None
    pruned_at: int | None = None
    wall_s: float = 0.0
    intermediate: tuple[float, ...] = field(default_factory=tuple)


def classify(exc: BaseException) -> str:
    """The failure kind of an exception raised inside a trial."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError) or "can't allocate memory" in text:
        return "host_oom"
    if "CUDA out of memory" in text or "OutOfMemoryError" in text:
        return "cuda_oom"
    if "Bus error" in text or "shared memory" in text or "No space left on device" in text:
        return "shm_exhausted"
    if "DataLoader worker" in text and (
        "killed by signal" in text or "exited unexpectedly" in text
    ):
        return "worker_died"
    if isinstance(exc, UsageError):
        return "invalid_config"
    if any(
        marker in text
        for marker in ("cannot identify image", "truncated", "could not decode", "Corrupt JPEG")
    ):
        return "corrupt_data"
    return "error"


def classify_signal(signum: int) -> Failure:
    name = signal.Signals(signum).name
    if signum == signal.SIGKILL:
        return Failure("host_oom", f"trial process killed by {name} (the kernel's OOM killer?)")
    if signum == signal.SIGBUS:
        return Failure("shm_exhausted", f"trial process killed by {name}")
    return Failure("error", f"trial process killed by {name}")


def _measure(job: TrialJob, report: Callable[[int, float], None]) -> Measurement:
    """Runs in the child: the window, with the GPU's utilization sampled where there is one."""
    import torch

    with open_sampler(torch.device(job.device)) as gpu:
        return _measure_window(job, report, gpu)


def _measure_window(
    job: TrialJob, report: Callable[[int, float], None], gpu: UtilizationSampler | None
) -> Measurement:
    """Builds the workload and the loader, then times the window."""
    import torch
    from torch.utils.data import RandomSampler

    from autotune.pipeline import loader, recipes
    from autotune.runtime.workload import TrainStep, build_model

    if job.pipeline.main_threads:
        torch.set_num_threads(job.pipeline.main_threads)
    torch.manual_seed(job.seed)
    device = torch.device(job.device)
    recipe = recipes.from_config(job.recipe)
    step = TrainStep(
        build_model(job.model, num_classes=len(job.source.classes)),
        device,
        lr=job.model.lr,
        channels_last=job.pipeline.channels_last,
    )
    w = job.window
    warmup = warmup_batches(job.pipeline.buffered_batches, w.warmup_extra_batches)
    if job.kind == "ceiling":
        config = PipelineConfig(batch_size=job.pipeline.batch_size, decoder="pil")
        batch = next(iter(loader.build(job.source, config, recipe=recipe, device=device)))
        return run_ceiling(
            batch,
            step,
            warmup=warmup,
            sub_windows=w.sub_windows,
            batches_per_window=w.batches_per_window,
            min_sub_window_s=w.min_sub_window_s,
            sync=step.sync,
            gpu=gpu,
        )
    # an endless sampler: no epoch ends inside the window (start-up is measured apart, rule 1)
    sampler = RandomSampler(
        range(len(job.source)),
        num_samples=ENDLESS,
        generator=torch.Generator().manual_seed(job.seed),
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    tuned = loader.build(
        job.source, job.pipeline, recipe=recipe, device=device, seed=job.seed, sampler=sampler
    )
    measurement = run_window(
        tuned,
        step,
        warmup=warmup,
        sub_windows=w.sub_windows,
        batches_per_window=w.batches_per_window,
        min_sub_window_s=w.min_sub_window_s,
        align=max(1, job.pipeline.num_workers),
        sync=step.sync,
        on_sub_window=report,
        gpu=gpu,
    )
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        measurement = dataclasses.replace(measurement, gpu_peak_memory_bytes=peak)
    return measurement


def _limit_memory(extra_bytes: int) -> None:
    """Caps this process's data segment (heap and private mappings) at what it has now plus
    ``extra_bytes``; its DataLoader workers inherit the cap. Allocations past it fail."""
    import resource

    with open("/proc/self/status") as status:
        held_kb = next(int(line.split()[1]) for line in status if line.startswith("VmData:"))
    limit = held_kb * 1024 + extra_bytes
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _child(job: TrialJob, conn: Any) -> None:
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
        measurement = _measure(job, report)
        conn.send(("done", measurement))
    except WindowStopped as stop:
        conn.send(("pruned", stop.args[0]))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, then the child ends
        detail = traceback.format_exc() if os.environ.get("AUTOTUNE_DEBUG") else ""
        conn.send(("failed", classify(exc), f"{type(exc).__name__}: {exc}".strip(), detail))


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


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_trial(
    job: TrialJob,
    *,
    timeout_s: float,
    should_prune: Callable[[int, float], bool] = lambda index, value: False,
    stop: threading.Event | None = None,
) -> TrialOutcome:
    """Runs ``job`` in a fresh child process and returns what happened, whatever happened.

    ``should_prune(index, running_median)`` is asked after each sub-window (in this process,
    so it may talk to Optuna's storage). Setting ``stop`` (Ctrl-C) ends the trial at once.
    """
    ctx = _context()
    parent_conn, child_conn = ctx.Pipe()
    # not a daemon: a daemonic process may not start DataLoader workers
    child = ctx.Process(target=_child, args=(job, child_conn))
    start = time.monotonic()
    child.start()
    child_conn.close()
    peak = 0
    next_sample = start
    intermediate: list[float] = []
    outcome: TrialOutcome | None = None
    try:
        while outcome is None:
            now = time.monotonic()
            if now >= next_sample:
                peak = max(peak, _tree_memory(child.pid))
                next_sample = now + MEMORY_SAMPLE_INTERVAL_S
            if stop is not None and stop.is_set():
                outcome = TrialOutcome(
                    "failed", failure=Failure("interrupted", "stopped by Ctrl-C")
                )
                break
            if now - start > timeout_s:
                outcome = TrialOutcome(
                    "failed", failure=Failure("timeout", f"no result after {timeout_s:.0f} s")
                )
                break
            if parent_conn.poll(MEMORY_SAMPLE_INTERVAL_S):
                try:
                    message = parent_conn.recv()
                except (EOFError, OSError):  # the child died mid-message
                    message = None
                if message is None:
                    child.join(5)
                    outcome = _death(child.exitcode)
                elif message[0] == "sub_window":
                    _, index, value = message
                    intermediate.append(value)
                    with contextlib.suppress(OSError):  # a dead child is noticed next turn
                        parent_conn.send("prune" if should_prune(index, value) else "go")
                elif message[0] == "done":
                    outcome = TrialOutcome("ok", measurement=message[1])
                elif message[0] == "pruned":
                    outcome = TrialOutcome("pruned", pruned_at=message[1])
                else:
                    _, kind, text, detail = message
                    if detail:
                        log.debug("trial failed:\n%s", detail)
                    outcome = TrialOutcome("failed", failure=Failure(kind, text))
            elif not child.is_alive():
                outcome = _death(child.exitcode)
    finally:
        reported = outcome is not None and (
            outcome.failure is None or outcome.failure.kind not in ("timeout", "interrupted")
        )
        if reported:
            child.join(GRACEFUL_EXIT_S)  # a child that reported shuts its workers down itself
        _kill_group(child.pid)  # then nothing of the trial survives it, workers included
        child.join(10)
        parent_conn.close()
    return TrialOutcome(
        outcome.status,
        measurement=outcome.measurement,
        failure=outcome.failure,
        peak_memory_bytes=peak or None,
        pruned_at=outcome.pruned_at,
        wall_s=time.monotonic() - start,
        intermediate=tuple(intermediate),
    )


def _context() -> multiprocessing.context.BaseContext:
    ctx = multiprocessing.get_context("forkserver")
    # imported once, in the server, instead of in every trial
    ctx.set_forkserver_preload(
        [
            "autotune.runtime.trial",
            "autotune.runtime.workload",
            "autotune.pipeline.loader",
            "torchvision.models",
        ]
    )
    return ctx


def _death(exitcode: int | None) -> TrialOutcome:
    if exitcode is not None and exitcode < 0:
        return TrialOutcome("failed", failure=classify_signal(-exitcode))
    return TrialOutcome(
        "failed", failure=Failure("error", f"trial process exited with code {exitcode}")
    )
