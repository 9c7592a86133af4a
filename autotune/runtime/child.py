"""What a trial's child process measures: the workload and the loader built from the job,
then the timed window (or the ceiling), the GPU's utilization sampled where there is one; or,
for an epochs job, real epochs (``runtime.epochs``).

Runs in the child only (``trial.run_trial`` starts it): it sets torch's threads and seed for
the whole process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

from autotune.pipeline import decoders, loader, recipes
from autotune.pipeline.batches import samples_in
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.user_data import UserData
from autotune.runtime.epochs import EpochTimes, measure_epochs
from autotune.runtime.gpu_monitor import UtilizationSampler, open_sampler
from autotune.runtime.job import TrialJob
from autotune.runtime.measurement import Measurement
from autotune.runtime.peers import ALONE, Peers
from autotune.runtime.window import run_ceiling, run_window
from autotune.runtime.window_length import warmup_batches
from autotune.runtime.workload import TrainStep, job_step

ENDLESS = 10**9  # samples: the window stops the loader long before

Report = Callable[[int, float], None]  # (sub-window index, rate so far) as each one ends


class UntilEnded(Sampler[int]):
    """Shuffled passes over ``range(n)`` without end, until ``end_epoch()``: the window runs
    without an epoch boundary, then makes one on purpose to time what a new epoch costs.
    Each ``iter()`` is a new epoch, endless again, or one pass after ``one_pass()`` (a
    whole epoch timed as a user's runs). Each pass is whole batches of
    ``batch_size`` (a random few left out of it, as ``drop_last`` does), so that a window can
    time whole passes (``pass_batches``). Of ``ranks``, rank ``rank`` reads every
    ``ranks``-th index of each pass from its ``rank``-th, as DistributedSampler shards: the
    same shuffle on every rank (one seed), a disjoint share each."""

    def __init__(
        self, n: int, seed: int, batch_size: int = 1, *, rank: int = 0, ranks: int = 1
    ) -> None:
        self.n, self.batch_size, self.ended, self._one_pass = n, batch_size, False, False
        self.rank, self.ranks = rank, ranks
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def pass_batches(self) -> int | None:
        """Batches a pass of this rank's share; None where it is less than a batch."""
        return self.n // self.ranks // self.batch_size or None

    def end_epoch(self) -> None:
        self.ended = True

    def one_pass(self) -> None:
        """The next epoch is one pass, then ends."""
        self._one_pass = True

    def __iter__(self) -> Iterator[int]:
        self.ended, passes = False, 1 if self._one_pass else None
        self._one_pass = False
        share = self.pass_batches * self.batch_size if self.pass_batches else self.n // self.ranks
        while not self.ended and passes != 0:
            order = torch.randperm(self.n, generator=self.generator)[: share * self.ranks]
            for index in order[self.rank :: self.ranks].tolist():
                if self.ended:  # read as the loader hands out work: stops within one batch
                    return
                yield index
            passes = None if passes is None else passes - 1

    def __len__(self) -> int:
        return ENDLESS


def compiled_graphs() -> int:
    """Graphs torch.compile has built in this process so far: a batch of a new shape
    compiles anew (after the second shape, Dynamo marks the dimension dynamic)."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def measure(job: TrialJob, report: Report, peers: Peers = ALONE) -> Measurement | EpochTimes:
    """The job's window (or ceiling, or epochs); ``report`` sees each sub-window of a window as
    it ends (it may raise ``WindowStopped``). ``peers``: the other ranks of a trial of
    several (``runtime.ranks``): this rank reads its shard of each pass, on its own GPU."""
    if job.kind == "epochs":
        return measure_epochs(job)
    device = _device(job, peers)
    with open_sampler(device) as gpu:
        recipe, step = _workload(job, device)
        if job.kind == "ceiling":
            return _time_ceiling(job, recipe, step, gpu, peers)
        return _time_window(job, recipe, step, report, gpu, peers)


def _device(job: TrialJob, peers: Peers) -> torch.device:
    """The job's device; on CUDA with several ranks, the rank's own GPU (torchrun's
    LOCAL_RANK: one node)."""
    device = torch.device(job.device)
    if device.type == "cuda" and peers.ranks > 1:
        return torch.device("cuda", peers.rank)
    return device


def _workload(job: TrialJob, device: torch.device) -> tuple[Recipe, TrainStep]:
    """The recipe and the training step, torch's threads and seed set first: the seed
    decides the model's random initialisation."""
    if job.pipeline.main_threads:
        torch.set_num_threads(job.pipeline.main_threads)
    torch.manual_seed(job.seed)
    recipe = recipes.from_config(job.recipe)
    step = job_step(
        job,
        num_classes=len(job.source.classes) or None,
        channels_last=job.pipeline.channels_last,
        device=device,
    )
    return recipe, step


def _timing(job: TrialJob) -> dict[str, Any]:
    """The window's shape, as ``run_window``'s keyword arguments."""
    w = job.window
    return {
        "warmup": warmup_batches(job.pipeline.buffered_batches, w.warmup_extra_batches),
        "buffered": job.pipeline.buffered_batches,
        "sub_windows": w.sub_windows,
        "epoch_sub_windows": w.epoch_sub_windows,
        "batches_per_window": w.batches_per_window,
        "min_sub_window_s": w.min_sub_window_s,
        "target_spread": w.target_spread,
        "max_timed_s": w.max_timed_s,
    }


def _time_ceiling(
    job: TrialJob,
    recipe: Recipe,
    step: TrainStep,
    gpu: UtilizationSampler | None,
    peers: Peers,
) -> Measurement:
    """The step alone, fed one batch already on the device."""
    config = PipelineConfig(batch_size=job.pipeline.batch_size, decoder=AS_IS)
    batch = next(iter(loader.build(job.source, config, recipe=recipe, device=step.device)))
    timing = {"sync": step.sync, "gpu": gpu, "count": _count(job), "peers": peers}
    return run_ceiling(batch, step, **_timing(job), **timing)


def _count(job: TrialJob) -> Callable[[Any], int]:
    """Samples in a batch: the batch size, exact for a sampled Dataset (the window's sampler
    never ends an epoch, so no batch is short); a stream's batches, counted one by one (a
    stream may end in a short batch)."""
    if _is_stream(job):
        return samples_in
    return lambda batch: job.pipeline.batch_size


def _is_stream(job: TrialJob) -> bool:
    """The job reads an iterable Dataset of the user's own."""
    return isinstance(job.source, UserData) and job.source.iterable


def _time_window(
    job: TrialJob,
    recipe: Recipe,
    step: TrainStep,
    report: Report,
    gpu: UtilizationSampler | None,
    peers: Peers,
) -> Measurement:
    """The step fed by the job's loader (this rank's shard of it), and the device memory it
    peaked at."""
    device = step.device
    stream = _is_stream(job)
    # no epoch ends inside the window (start-up is timed on its own); one ends after it. A
    # stream has no sampler: it is read again and again, each worker its own share
    batch_size = job.pipeline.batch_size
    shard = {"rank": peers.rank, "ranks": peers.ranks}
    sampler = None if stream else UntilEnded(len(job.source), job.seed, batch_size, **shard)
    # DALI reads the sampler ahead on its own: no boundary is made there
    own_loader = decoders.DECODERS.get(job.pipeline.decoder)
    makes_epochs = sampler is not None and (own_loader is None or not own_loader.replaces_loader)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    tuned = loader.build(
        job.source,
        job.pipeline,
        recipe=recipe,
        device=device,
        seed=job.seed,
        sampler=sampler,
        repeat=stream,
        prepared=job.prepared,
    )
    measurement = run_window(
        tuned,
        step,
        **_timing(job),
        align=max(1, job.pipeline.num_workers),
        sync=step.sync,
        on_sub_window=report,
        gpu=gpu,
        end_epoch=sampler.end_epoch if makes_epochs else None,
        one_pass=sampler.one_pass if makes_epochs else None,
        count=_count(job),
        # the loader's batches are the sampler's passes cut in whole batches (DALI reads the
        # sampler ahead on its own: no passes known there)
        pass_batches=sampler.pass_batches if makes_epochs else None,
        peers=peers,
        compiles=compiled_graphs if job.compile_cache is not None else lambda: 0,
    )
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        measurement = dataclasses.replace(measurement, gpu_peak_memory_bytes=peak)
    return measurement
