"""Where a sample's time goes: the loader's stages timed one by one, in this process.

Each stage of the per-sample pipeline (``Recipe.__call__``: read the bytes, decode, augment;
then the batch's collate; for the user's pipeline as it is, PIL's decode as ImageFolder's
loader does it, then the recipe's transforms.v2) is timed on its own, in CPU seconds
(``time.thread_time``) and wall seconds, single-threaded as a DataLoader worker runs it. The
sum of the CPU seconds bounds what any number of workers can deliver: ``usable CPUs / CPU
seconds per sample``.

Example:
    >>> profile = profile_stages(source, recipe, "pil", n_samples=64)
    >>> profile.cpu_work_bound(usable_cpus=8)   # samples/s, whatever num_workers is
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import default_collate

from autotune.pipeline.prepared import DecodedPixels
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source
from autotune.runtime.sample_stages import (
    SampleStages,
    StageClock,
    sample_stages,
)
from autotune.runtime.threads import threads

UNREADABLE = (OSError, ValueError, RuntimeError)  # what the loader skips a file for
OWN_READ = "getitem"  # the stage of the user's own Dataset's read: its own code, whole


@dataclass(frozen=True)
class StageTime:
    """Seconds per sample of one stage: CPU time of the thread that ran it, and wall time."""

    cpu_s: float
    wall_s: float


@dataclass(frozen=True)
class SampleTime:
    """One sample's way through read, decode and augment (wall seconds)."""

    path: str  # of the user's own Dataset: which sample, in words
    size_bytes: int
    width: int
    height: int
    read_s: float
    decode_s: float
    augment_s: float
    own_s: float = 0.0  # the user's own Dataset's whole read of the sample, its own code

    @property
    def load_s(self) -> float:
        """What a worker spends on this sample before the batch is collated."""
        return self.read_s + self.decode_s + self.augment_s + self.own_s


@dataclass(frozen=True)
class StageProfile:
    """Per-sample stage times of one decoder on a set of samples.

    Example:
        >>> p = profile_stages(source, recipe, "torchvision")
        >>> p.stages["decode"].cpu_s, p.cpu_work_bound(4), p.slowest(5)
    """

    decoder: str
    # seconds per sample of each stage: LOADER_STAGES, or of the user's own Dataset,
    # OWN_STAGES (``autotune.runtime.own_stages``)
    stages: dict[str, StageTime]
    samples: tuple[SampleTime, ...]
    skipped: tuple[str, ...] = ()  # files that could not be decoded

    @property
    def own_dataset(self) -> bool:
        """Whether these are the stages of the user's own Dataset (its read is one stage)."""
        return OWN_READ in self.stages

    def cpu_s(self, stages: Sequence[str] | None = None) -> float:
        """CPU seconds per sample of ``stages`` (None: all of them)."""
        return sum(self.stages[name].cpu_s for name in stages or self.stages)

    def wall_s(self, stages: Sequence[str] | None = None) -> float:
        """Wall seconds per sample of ``stages`` run one after the other (``num_workers=0``)."""
        return sum(self.stages[name].wall_s for name in stages or self.stages)

    def cpu_work_bound(self, usable_cpus: int, stages: Sequence[str] | None = None) -> float:
        """The most samples/s any worker count can deliver: every usable CPU busy with
        ``stages`` and nothing else."""
        if usable_cpus < 1:
            raise ValueError(f"`usable_cpus >= 1` must hold, but got ({usable_cpus=}).")
        cpu = self.cpu_s(stages)
        return usable_cpus / cpu if cpu > 0 else math.inf

    def cpu_share(self, stage: str, stages: Sequence[str] | None = None) -> float:
        """``stage``'s share of the CPU time of ``stages``."""
        total = self.cpu_s(stages)
        return self.stages[stage].cpu_s / total if total > 0 else 0.0

    def load_percentiles(self, percents: Sequence[float] = (50, 90, 99)) -> dict[float, float]:
        """Per-sample load time (read + decode + augment, or the own Dataset's read; wall
        seconds) at ``percents``."""
        loads = [s.load_s for s in self.samples]
        return {p: float(np.percentile(loads, p)) for p in percents}

    def slowest(self, k: int) -> list[SampleTime]:
        """The ``k`` samples that took longest to load, slowest first."""
        return sorted(self.samples, key=lambda s: s.load_s, reverse=True)[:k]


def pick(n_items: int, n_samples: int, seed: int) -> list[int]:
    """``n_samples`` indices of ``range(n_items)`` drawn without replacement (all of them, in
    order, when there are not more)."""
    if n_samples >= n_items:
        return list(range(n_items))
    return sorted(np.random.default_rng(seed).choice(n_items, n_samples, replace=False).tolist())


def profile_stages(
    source: Source | DecodedPixels,
    recipe: Recipe,
    decoder_name: str,
    n_samples: int = 64,
    batch_size: int = 32,
    seed: int = 0,
    *,
    indices: Sequence[int] | None = None,
    warmup: int = 2,
    second_look: int = 0,
) -> StageProfile:
    """Times read, decode, augment and collate per sample, single-threaded like a worker.

    Args:
        source: the samples: image files (a dataset, or its resized copy) or a decoded
            copy's pixels (read is then the mapped view, decode nothing).
        recipe: the augmentation (its random draws are seeded with ``seed``; torch's global
            random state is left as it was).
        decoder_name: a CPU decoder of ``decoders.DECODERS``, or ``as_is`` (the tutorial's).
        n_samples: how many samples (drawn with ``seed``; all when the source has fewer).
        batch_size: samples per collate, as in the loader.
        seed: picks the samples and seeds the augmentation.
        indices: the samples to time, instead of drawing ``n_samples``.
        warmup: samples decoded untimed first (a decoder's first call pays its set-up).
        second_look: how many of the slowest samples to decode and augment again, each
            kept at the faster of its two times: a sample the machine preempted once is not
            the latency tail (its read is timed once: a second read would be warm).

    Returns:
        Seconds per sample of each stage, and each sample's own times (the latency tail).
    """
    if batch_size < 1:
        raise ValueError(f"`batch_size >= 1` must hold, but got ({batch_size=}).")
    chosen = list(indices) if indices is not None else pick(len(source), n_samples, seed)
    if not chosen:
        raise ValueError("no samples to profile")
    sample = sample_stages(recipe, decoder_name, decoded=isinstance(source, DecodedPixels))
    with threads(1), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for index in chosen[:warmup]:
            with contextlib.suppress(*UNREADABLE):
                sample(source.read(index), StageClock())
        total, timed, skipped = _time_samples(source, sample, chosen, batch_size)
        samples = _second_look(source, sample, timed, second_look)
    if not samples:
        raise ValueError(f"none of the {len(chosen)} samples could be decoded")
    return StageProfile(
        decoder_name, per_sample(total, len(samples)), tuple(samples), tuple(skipped)
    )


def per_sample(total: StageClock, n: int) -> dict[str, StageTime]:
    """Each stage's seconds per sample: what ``total`` charged over ``n`` samples."""
    return {
        name: StageTime(cpu_s=total.cpu[name] / n, wall_s=total.wall[name] / n)
        for name in total.cpu
    }


def _second_look(
    source: Source | DecodedPixels,
    sample: SampleStages,
    timed: list[tuple[int, SampleTime]],
    slowest: int,
) -> list[SampleTime]:
    """Each sample's times, the ``slowest`` (by their first) decoded and augmented again,
    each at the faster of its two decode-and-augment times."""
    samples = [each for _, each in timed]
    by_load = sorted(range(len(timed)), key=lambda i: samples[i].load_s, reverse=True)
    for i in by_load[:slowest]:
        index, first = timed[i]
        data = source.read(index)
        clock = StageClock()  # from here: the read is not timed again
        sample(data, clock)
        decode_s, augment_s = clock.wall["decode"], clock.wall["augment"]
        if decode_s + augment_s < first.decode_s + first.augment_s:
            samples[i] = dataclasses.replace(first, decode_s=decode_s, augment_s=augment_s)
    return samples


def _time_samples(
    source: Source | DecodedPixels,
    sample: SampleStages,
    indices: Sequence[int],
    batch_size: int,
) -> tuple[StageClock, list[tuple[int, SampleTime]], list[str]]:
    """Reads, decodes and augments each sample on its own clock, and collates them by
    ``batch_size``. Returns the stage times of all, each sample's index and times, and the
    files that could not be decoded."""
    total = StageClock()
    samples: list[tuple[int, SampleTime]] = []
    skipped: list[str] = []
    batch: list[tuple[torch.Tensor, int]] = []
    for index in indices:
        clock = StageClock()
        try:  # a file damaged past its header: the loader skips it, and so does this
            data = source.read(index)
            clock.lap("read")
            image, width, height = sample(data, clock)
        except UNREADABLE:
            skipped.append(source.paths[index])
            continue
        total.add(clock)
        samples.append(
            (
                index,
                SampleTime(
                    path=source.paths[index],
                    size_bytes=data.nbytes if isinstance(data, torch.Tensor) else len(data),
                    width=width,
                    height=height,
                    read_s=clock.wall["read"],
                    decode_s=clock.wall["decode"],
                    augment_s=clock.wall["augment"],
                ),
            )
        )
        batch.append((image, source.labels[index]))
        if len(batch) == batch_size:
            _collate(batch, total)
            batch = []
    if batch:  # the last, smaller batch
        _collate(batch, total)
    return total, samples, skipped


def _collate(batch: list[tuple[torch.Tensor, int]], clock: StageClock) -> None:
    """Collates ``batch`` as the loader does, charging the time to the collate stage."""
    clock.reset()
    default_collate(batch)
    clock.lap("collate")
