"""Real epochs in a trial's child process: one way of loading the data (an arm), timed pass by
pass, as a user's training loop runs it.

Three arms, each what a user would write:

- ``baseline``: the PyTorch tutorial pipeline: ``torchvision.datasets.ImageFolder(root)`` with
  its default PIL loader, a ``transforms.v2.Compose`` of the study's recipe, and
  ``DataLoader(ds, batch_size, shuffle=True)``; torch's default thread count. Of the user's
  own Dataset: that Dataset and its collate, ``DataLoader(ds, batch_size, shuffle=True,
  collate_fn=...)`` (a stream is not shuffled: it orders itself).
- ``loader_kwargs``: the same Dataset, ``DataLoader(ds, shuffle=True, **loader_kwargs(best))``.
- ``build_loader``: ``build_loader(source, best)``, the whole tuned pipeline (image folders
  only: the user's own Dataset is read as it is).

An epoch is a full shuffled pass from a fresh iterator: its start (workers spawned, or
refilled when they persist) and its tail are inside its time. The model's own start on the
device (CUDA's lazy loading, cuDNN's and cuBLAS's handles: most of a second for a ResNet-50
on a GPU) is the same for every arm and none of the loader's: a few steps on a batch read
here take it before the first epoch, as a trial's warm-up does before its timing.

A run's first epoch carries what the run pays once (persistent workers spawned, their first
round, files read before they were cached): it is timed apart (``EpochTimes.first``), and
the epochs after it are the run's figure, as a trial's epochs come after its warm-up. A long
run pays that start once over all its epochs; the first epoch says what it is.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, default_collate

from autotune.pipeline import batches, recipes
from autotune.pipeline.batches import samples_in
from autotune.pipeline.sources import Source
from autotune.pipeline.tutorial import tutorial_dataset
from autotune.pipeline.user_api import build_loader, loader_kwargs
from autotune.pipeline.user_data import UserData
from autotune.runtime.job import EpochRun, TrialJob
from autotune.runtime.workload import TrainStep, job_step

ARMS = ("baseline", "loader_kwargs", "build_loader")
WARMUP_STEPS = 3  # untimed, on one batch: the model's start on the device (a GradScaler's too)

Batch = Any
ToDevice = Callable[[Batch], Batch]


@dataclass(frozen=True)
class EpochTime:
    """One timed epoch. Times are seconds since ``iter()`` on the loader."""

    samples: int
    seconds: float  # to the last step done, the device synchronized
    first_batch_s: float  # to the first batch in hand: worker start-up and first fill
    step_done_s: tuple[float, ...]  # after each step (not synchronized: a GPU may lag)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class EpochTimes:
    """What one run of an arm measured, and what it really ran (reported from the child)."""

    arm: str
    dataset: str  # the type the DataLoader reads from, e.g. torchvision...ImageFolder
    reader: str  # how a sample is read: ImageFolder's loader function, or the decoder
    transform: str  # the Dataset's transforms, by name ("" for the tuned pipeline's own)
    threads: int  # torch intra-op threads of the training process while timed
    epochs: tuple[EpochTime, ...]  # after the first: the run's figure
    first: EpochTime | None = None  # the run's first epoch: its one-off start inside


def time_epoch(
    batches: Iterable[Batch],
    step: Callable[[Batch], None],
    *,
    to_device: ToDevice,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
) -> EpochTime:
    """Times one pass over ``batches``: from ``iter()`` (inside the clock: worker start-up
    counts) to the last step done."""
    sync()
    start = clock()
    first_batch_s: float | None = None
    done: list[float] = []
    samples = 0
    for batch in batches:
        if first_batch_s is None:
            first_batch_s = clock() - start
        batch = to_device(batch)
        step(batch)
        samples += samples_in(batch)
        done.append(round(clock() - start, 6))
    sync()
    seconds = clock() - start
    return EpochTime(
        samples, seconds, seconds if first_batch_s is None else first_batch_s, tuple(done)
    )


def subset_source(source: Source, subset: Iterable[int] | None) -> Source:
    """The source restricted to the samples at ``subset`` (in its own order)."""
    if subset is None:
        return source
    keep = sorted(set(subset))
    return dataclasses.replace(
        source,
        paths=tuple(source.paths[i] for i in keep),
        labels=tuple(source.labels[i] for i in keep),
    )


def _copy_to(device: torch.device) -> ToDevice:
    """What the tutorial's loop does with each batch: ``.to(device)``."""

    def to_device(batch: Batch) -> Batch:
        return batches.to_device(batch, device)

    return to_device


def _already_there(batch: Batch) -> Batch:
    return batch


def arm_loader(job: TrialJob, spec: EpochRun) -> tuple[Iterable[Batch], ToDevice, Any]:
    """The arm's loader, what each batch needs to reach the device, and the Dataset read."""
    device = torch.device(job.device)
    if spec.arm not in ARMS:
        raise ValueError(f"unknown arm {spec.arm!r}: one of {', '.join(ARMS)}")
    if spec.arm != "baseline" and spec.best_path is None:
        raise ValueError(f"arm {spec.arm} needs the best.yaml it loads")
    source = job.source
    if spec.arm == "build_loader":
        if not isinstance(source, Source):
            raise ValueError("arm build_loader reads image folders: your own Dataset is as is")
        tuned = build_loader(subset_source(source, spec.subset), spec.best_path, device=device)
        return tuned, _already_there, getattr(tuned, "dataloader", tuned)
    dataset, collate_fn = _as_it_is(job, spec)
    # a stream orders itself: DataLoader refuses shuffle for it
    order = {} if isinstance(dataset, IterableDataset) else {"shuffle": True}
    if spec.arm == "baseline":
        settings = {"batch_size": job.pipeline.batch_size}
    else:
        settings = loader_kwargs(spec.best_path)
    loader = DataLoader(dataset, collate_fn=collate_fn, **order, **settings)
    return loader, _copy_to(device), loader


def _as_it_is(job: TrialJob, spec: EpochRun) -> tuple[Dataset, Callable[[list[Any]], Any] | None]:
    """What the as-it-is arms read, restricted to ``spec.subset``: the user's own Dataset and
    collate, or a folder through the tutorial's ImageFolder and DataLoader's default collate."""
    source = job.source
    if isinstance(source, Source):
        wanted = None if spec.subset is None else [source.paths[i] for i in spec.subset]
        return tutorial_dataset(source, recipes.from_config(job.recipe), wanted), None
    if not isinstance(source, UserData):
        raise ValueError(f"an epochs job reads a folder or your own Dataset, not {source!r}")
    dataset, collate_fn = source.open()
    if spec.subset is not None:
        if isinstance(dataset, IterableDataset):
            raise ValueError("a stream cannot be read in part: verify reads all of it")
        dataset = Subset(dataset, list(spec.subset))
    return dataset, collate_fn


def read_dataset(read_from: Any) -> Any:
    """The Dataset a DataLoader reads, with any ``Subset`` unwrapped."""
    dataset = getattr(read_from, "dataset", read_from)
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return dataset


def describe_dataset(dataset: Any) -> tuple[str, str, str]:
    """(the Dataset's qualified type, how it reads a sample, its transforms by name)."""
    kind = type(dataset)
    reader = getattr(dataset, "loader", None)
    if callable(reader):
        how = f"{reader.__module__}.{reader.__qualname__}"
    elif hasattr(dataset, "decoder_name"):
        how = f"decoder {dataset.decoder_name}"
    else:  # the user's own: it reads as its own code says
        how = f"its own {'__iter__' if isinstance(dataset, IterableDataset) else '__getitem__'}"
    transform = getattr(dataset, "transform", None)
    steps = getattr(transform, "transforms", [transform] if transform else [])
    names = ", ".join(type(t).__name__ for t in steps)
    return f"{kind.__module__}.{kind.__qualname__}", how, names


def measure_epochs(job: TrialJob) -> EpochTimes:
    """Runs the job's arm for a first epoch and then its epochs, each from a fresh iterator
    of one loader."""
    spec = job.epochs
    if spec is None:
        raise ValueError("an epochs job needs its EpochRun")
    torch.manual_seed(job.seed)  # the model's initialisation and the tutorial's shuffle
    loader, to_device, read_from = arm_loader(job, spec)
    dataset = read_dataset(read_from)
    # ImageFolder counts every class folder, the scan only those with images: labels of both
    num_classes = max(len(job.source.classes), len(getattr(dataset, "classes", ())))
    step = job_step(
        job,
        num_classes=num_classes or None,  # a Dataset without classes: the model's own
        channels_last=spec.arm == "build_loader" and job.pipeline.channels_last,
    )
    kind, reader, transform = describe_dataset(dataset)
    warm_up(step, _warm_up_batch(job, spec, read_from), to_device=_copy_to(step.device))
    first, *timed = (
        time_epoch(loader, step, to_device=to_device, sync=step.sync)
        for _ in range(1 + spec.epochs)
    )
    threads = torch.get_num_threads()
    return EpochTimes(spec.arm, kind, reader, transform, threads, tuple(timed), first)


def warm_up(step: TrainStep, batch: Batch, *, to_device: ToDevice) -> None:
    """``WARMUP_STEPS`` untimed steps on ``batch``, the device synchronized after them."""
    batch = to_device(batch)
    for _ in range(WARMUP_STEPS):
        step(batch)
    step.sync()


def _warm_up_batch(job: TrialJob, spec: EpochRun, read_from: Any) -> Batch:
    """One batch in the form the step takes, read here without touching the arm's loader
    (its workers, its sampler's draws): the as-it-is Dataset's first samples, collated as the
    arm collates them (the tuned pipeline's batches have the tutorial Dataset's form)."""
    if spec.arm == "build_loader":
        dataset, collate = tutorial_dataset(job.source, recipes.from_config(job.recipe)), None
    else:
        dataset, collate = read_from.dataset, read_from.collate_fn
    size = getattr(read_from, "batch_size", None) or job.pipeline.batch_size  # the arm's
    if isinstance(dataset, IterableDataset):
        items = list(itertools.islice(iter(dataset), size))
    else:
        items = [dataset[i] for i in range(min(size, len(dataset)))]
    return (collate or default_collate)(items)
