"""The settings ``autotune.DataLoader`` may explore on a run: the study's default search space,
narrowed to what a running loader may switch (``SWITCHABLE``: the DataLoader's worker
settings and the training process's threads), sized to this machine; the run's own settings
in it; and what is measured right after them (``priors``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from importlib import resources
from typing import Any

import torch
import yaml

from autotune.machine import MachineFacts
from autotune.online import threads
from autotune.pipeline.config import AS_IS, SWITCHABLE, PipelineConfig
from autotune.pipeline.streams import asks_its_share
from autotune.schema import KnobConfig, SearchSpaceConfig
from autotune.session.read_wait import ReadWait
from autotune.session.space import SearchSpace


def online_space(
    facts: MachineFacts,
    *,
    batch_size: int,
    cuda: bool,
    ranks: int = 1,
    read_wait: ReadWait | None = None,
    workers: tuple[int, ...] | None = None,
) -> SearchSpace:
    """The default search space's knobs that a run may switch (``SWITCHABLE``), sized to
    this machine (a rank's share of it, where ``ranks`` share it; ``num_workers`` beyond the
    CPUs where ``read_wait`` says reads wait; ``workers``: the only counts it may take, where
    given); the user's Dataset and batches are as they are."""
    text = resources.files("autotune.conf").joinpath("search_space", "default.yaml").read_text()
    knobs = {
        name: KnobConfig(**conf)
        for name, conf in yaml.safe_load(text)["knobs"].items()
        if name in SWITCHABLE
    }
    device = "cuda" if cuda else "cpu"
    space_conf = SearchSpaceConfig(name="online", knobs=knobs)
    space = SearchSpace.from_config(
        space_conf, facts, device=device, batch_size=batch_size, own_dataset=True, ranks=ranks,
        read_wait=read_wait,
    )  # fmt: skip
    if workers is None:
        return space
    counts = {"type": "choice", "choices": workers}
    knobs = tuple(
        dataclasses.replace(k, **counts) if k.name == "num_workers" else k for k in space.knobs
    )
    return dataclasses.replace(space, knobs=knobs)


def stream_workers(loader: torch.utils.data.DataLoader) -> tuple[int, ...] | None:
    """The worker counts a stream may be read with where it does not read its worker's share
    alone (``streams.asks_its_share``): each worker would read all of it, every sample once a
    worker, so no more than one, or the user's own count where that is more (their run reads
    each sample that many times, and that is not this loader's to change); None: any."""
    dataset = loader.dataset
    if not isinstance(dataset, torch.utils.data.IterableDataset) or asks_its_share(dataset):
        return None
    return (0, 1) if loader.num_workers <= 1 else (loader.num_workers,)


def own_settings(loader: torch.utils.data.DataLoader) -> PipelineConfig:
    """The settings a run's loader was given, as a point of the space (its torch threads
    named, so that its start is a trial like any other)."""
    workers = loader.num_workers
    return PipelineConfig(
        decoder=AS_IS,
        main_threads=threads.yours(),  # where a loader set the count in place: yours before
        num_workers=workers,
        prefetch_factor=loader.prefetch_factor if workers else None,
        persistent_workers=loader.persistent_workers and workers > 0,  # set on it since, too
        pin_memory=loader.pin_memory,
        batch_size=loader.batch_size or 1,
    )


def priors(
    space: SearchSpace, start: PipelineConfig, fits: Callable[[PipelineConfig], bool]
) -> list[dict[str, Any]]:
    """What is measured right after the run's own settings, as params of ``space``: the
    setting DataLoader guides give this machine (a worker per usable CPU, kept alive, torch's
    default prefetch, the training process on one thread); where reads wait, first the same
    with as many workers as the waits ask for (the most the space allows), or as an epoch
    ``fits``: the run's own reading says a worker per CPU leaves them idle, and a budget of
    one epoch may hold one setting. Those that are the run's own or not points of the space
    are left out."""
    workers = space.choices("num_workers") or [0]
    cpus = min(max(workers), max(space.choices("main_threads") or workers))  # a rank's CPUs

    pin = start.pin_memory and bool(space.choices("pin_memory"))  # not where nothing is pinned

    def guides(count: int) -> PipelineConfig:
        return dataclasses.replace(
            start, num_workers=count, prefetch_factor=2, persistent_workers=True, main_threads=1,
            pin_memory=pin,
        )  # fmt: skip

    beyond = (guides(n) for n in sorted(workers, reverse=True) if n > cpus)
    most = next((g for g in beyond if fits(g)), None)  # the first an epoch can time
    found = [guides(cpus)] if most is None else [most, guides(cpus)]
    params = [space.params_of(g) for g in found if g.num_workers and g != start]
    return [p for p in params if p is not None]


def trains_on_cuda() -> bool:
    """Whether the run's loop trains on a CUDA device, judged when exploring starts (after
    the run's first batches): CUDA is initialized in this process by then. A loop that trains
    on the CPU of a GPU host never initializes it, and pinned batches would only cost it."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def unsplit_note(dataset: object, workers: tuple[int, ...]) -> str:
    """Why a stream's workers stay at ``workers`` (``stream_workers``), in one line."""
    counts = " or ".join(map(str, workers))
    return (
        f"{type(dataset).__name__} was not seen asking get_worker_info() as it starts, so each "
        f"worker may read all of it: num_workers stays {counts} (read only the worker's share "
        "in __iter__ to have it tuned; a worker_init_fn that splits it is not seen)"
    )
