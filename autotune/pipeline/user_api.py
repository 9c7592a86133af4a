"""Using a tuned result in your own training script: ``build_loader`` and ``loader_kwargs``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler, IterableDataset

from autotune import machine
from autotune.pipeline import best_file, loader, preparation, prepared, recipes, sources
from autotune.pipeline.config import PipelineConfig
from autotune.schema import RecipeConfig


def load_pipeline_config(path: str | Path) -> PipelineConfig:
    """The ``PipelineConfig`` stored in a best.yaml (warns if it was measured elsewhere)."""
    best = best_file.read(path)
    best_file.warn_if_other_machine(best.machine, path)
    return best.config


def loader_kwargs(path: str | Path) -> dict[str, Any]:
    """The ``torch.utils.data.DataLoader`` arguments a best.yaml tuned for your pipeline as
    it is (``loader_kwargs:``; measured on your Dataset, for a folder the tutorial's
    ImageFolder with the recipe's transforms.v2). Sets the process's torch threads to the tuned
    ``main_threads``: part of what was measured.

    Example:
        >>> DataLoader(my_dataset, shuffle=True, **autotune.loader_kwargs("best.yaml"))
    """
    best = best_file.read(path)
    best_file.warn_if_other_machine(best.machine, path)
    best_file.warn_if_other_ranks(best.ranks, path)
    config = best_file.as_is_of(best, path)
    if config.main_threads:
        torch.set_num_threads(config.main_threads)
    kwargs = config.loader_kwargs()
    if best.study.kept_by:  # a training run's: what shapes its batches is the caller's own
        kwargs = {k: v for k, v in kwargs.items() if k not in ("drop_last", "in_order")}
    return kwargs


def build_loader(
    data: Dataset | sources.Source | str | Path,
    best: str | Path | PipelineConfig,
    *,
    recipe: str | recipes.Recipe | None = None,
    device: str | torch.device | None = None,
    seed: int | None = 0,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    prepared_dir: str | Path | None = None,
    **recipe_settings: Any,
) -> loader.TunedLoader:
    """The tuned pipeline, built the same way the trials measured it.

    Args:
        data: a folder of class sub-folders, a ``Source``, or your own Dataset: read as it
            is when the best.yaml was tuned on it (``decoder: as_is``), else returning
            ``(uint8 CHW tensor, label)`` for the tuned pipeline's device stage.
        best: a best.yaml path (or a ``PipelineConfig``).
        recipe: ``imagenet_train`` / ``center_crop_eval`` or a Recipe; default: the recipe the
            study measured (from best.yaml).
        device: where batches arrive; default: the study's device if usable here, else cpu.
        seed: seeds shuffling and the workers' augmentation.
        collate_fn: your Dataset's own collate (read as it is).
        prepared_dir: where the prepared copy ``cache:`` names is kept (found there, or made
            there once, with every usable CPU); default: where the study kept its own.
        recipe_settings: overrides of the recipe's settings, e.g. ``crop_size=160``.

    Batches come out on ``device``, augmented and normalized, ready for the model. The
    process's torch threads are set to the tuned ``main_threads`` (part of what was measured).

    Under torchrun (``WORLD_SIZE`` > 1) each rank reads its shard of every epoch (reshuffled
    each epoch from ``seed``: no ``set_epoch`` to call), onto its own GPU (``LOCAL_RANK``).

    Example:
        >>> loader = build_loader("data/train", "studies/mine-resnet50/best.yaml")
        >>> for images, labels in loader:
        ...     train_step(images, labels)
    """
    if isinstance(best, PipelineConfig):
        config, workload = best, best_file.WorkloadSection()
    else:
        read = best_file.read(best)
        best_file.warn_if_other_machine(read.machine, best)
        best_file.warn_if_other_ranks(read.ranks, best)
        config, workload = read.config, read.workload
    if isinstance(data, (str, Path)):
        data = sources.scan_imagefolder(data)
    if not isinstance(recipe, recipes.Recipe):
        measured = dict(workload.recipe or {})
        if recipe is not None and recipe != measured.get("name"):
            measured = {"name": recipe}
        recipe = recipes.from_config(RecipeConfig(**{**measured, **recipe_settings}))
    if config.main_threads:
        torch.set_num_threads(config.main_threads)
    device, sampler = _placement(data, device, workload.device or "cpu", seed)
    reading = {"recipe": recipe, "device": device, "seed": seed, "sampler": sampler}
    folder = prepared_dir or workload.prepared_dir or Path("studies") / "prepared"
    copy = _prepared_copy(data, config, recipe, Path(folder))
    return loader.build(data, config, collate_fn=collate_fn, prepared=copy, **reading)


def _prepared_copy(
    data: Any, config: PipelineConfig, recipe: recipes.Recipe, folder: Path
) -> prepared.PreparedCopy | None:
    """The copy ``config.cache`` names, found in ``folder`` or made there once."""
    if config.cache == "none" or not isinstance(data, sources.Source):
        return None  # a Dataset of your own: loader.build says why it has no copy
    cpus = machine.detect(want_cuda=False).usable_cpus
    return preparation.ensure(data, recipe, config.cache, folder, processes=cpus)


def _placement(
    data: Any, device: str | torch.device | None, measured: str, seed: int | None
) -> tuple[str | torch.device, DistributedSampler | None]:
    """Where batches go (given, else the study's device if usable here, else cpu), and in a
    torchrun job of several ranks, this rank's GPU and its shard of each epoch."""
    rank = torchrun_rank()
    if device is None:
        device = measured if measured != "cuda" or torch.cuda.is_available() else "cpu"
        if device == "cuda" and rank is not None:
            device = f"cuda:{rank.local_rank}"
    if rank is None or isinstance(data, IterableDataset):  # a stream shards itself
        return device, None
    return device, EpochShards(data, num_replicas=rank.world_size, rank=rank.rank, seed=seed or 0)


@dataclass(frozen=True)
class Rank:
    """This process's place in a torchrun job (its environment)."""

    rank: int
    world_size: int
    local_rank: int


def torchrun_rank() -> Rank | None:
    """The rank torchrun's environment names; None outside a job of several ranks."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return None
    return Rank(
        rank=int(os.environ["RANK"]),
        world_size=world_size,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )


class EpochShards(DistributedSampler):
    """DistributedSampler that moves to the next epoch's shuffle by itself at each
    ``iter()``, where a training loop would have to call ``set_epoch``."""

    def __iter__(self) -> Iterator[int]:
        indices = super().__iter__()
        self.set_epoch(self.epoch + 1)
        return indices
