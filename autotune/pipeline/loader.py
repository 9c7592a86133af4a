"""build(): the one builder both the trial runner and users' training scripts call.

What was measured is what the user gets: a trial and ``autotune.build_loader`` go through
the same ``build`` with the same ``PipelineConfig``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from autotune.pipeline import decoders
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source

log = logging.getLogger(__name__)


class EncodedImageDataset(Dataset):
    """Reads, decodes and augments one sample of a ``Source``; returns ``(uint8 CHW, label)``."""

    def __init__(self, source: Source, *, decoder: str, recipe: Recipe) -> None:
        decoders.DECODERS[decoder]  # fail here, not in a worker, on an unknown name
        self.source, self.decoder_name, self.recipe = source, decoder, recipe
        self._decoder: decoders.Decoder | None = None  # built in the process that decodes
        self._bad: set[str] = set()

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self._decoder is None:
            self._decoder = decoders.get(self.decoder_name)
        # A file that passed the scan but fails to decode (damage past its header) is skipped
        # for the next one, and named once: one bad image must not end a training run.
        for attempt in range(len(self.source)):
            i = (index + attempt) % len(self.source)
            try:
                return self.recipe(self.source.read(i), self._decoder), self.source.labels[i]
            except (OSError, ValueError, RuntimeError) as exc:
                if self.source.paths[i] not in self._bad:
                    self._bad.add(self.source.paths[i])
                    log.warning("skipping %s: %s", self.source.paths[i], exc)
        raise ValueError(f"no image of {self.source.root} could be decoded")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_decoder": None}  # decoder libraries stay per process


def worker_init(worker_id: int) -> None:
    """One thread per worker: N workers each running N threads oversubscribe a small host."""
    torch.set_num_threads(1)
    try:
        import cv2

        cv2.setNumThreads(0)
    except ImportError:
        pass


class DeviceStage:
    """Moves a uint8 batch to the device and normalizes it there (in float32)."""

    def __init__(self, recipe: Recipe, device: torch.device, *, non_blocking: bool) -> None:
        shape = (1, -1, 1, 1)
        self.device, self.non_blocking = device, non_blocking
        self.mean = torch.tensor(recipe.mean, device=device).mul(255).view(shape)
        self.inv_std = torch.tensor(recipe.std, device=device).mul(255).reciprocal().view(shape)

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        images = images.to(self.device, non_blocking=self.non_blocking)
        labels = labels.to(self.device, non_blocking=self.non_blocking)
        return images.float().sub_(self.mean).mul_(self.inv_std), labels


class TunedLoader:
    """A DataLoader plus the device stage: yields batches ready for the model.

    Example:
        >>> loader = autotune.build_loader(source, "studies/synthetic-tiny/best.yaml")
        >>> for images, labels in loader:
        ...     loss = criterion(model(images), labels)
    """

    def __init__(self, dataloader: DataLoader, stage: DeviceStage, config: PipelineConfig):
        self.dataloader, self.stage, self.config = dataloader, stage, config

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for images, labels in self.dataloader:
            yield self.stage(images, labels)

    def __len__(self) -> int:
        return len(self.dataloader)


def build(
    dataset: Dataset | Source,
    config: PipelineConfig,
    *,
    recipe: Recipe,
    device: torch.device | str = "cpu",
    seed: int | None = 0,
    sampler: Sampler[int] | Sequence[int] | None = None,
) -> TunedLoader:
    """Builds the loader a ``PipelineConfig`` describes.

    Args:
        dataset: a ``Source`` (decoded with ``config.decoder`` and ``recipe``) or any Dataset
            that already returns ``(uint8 CHW tensor, label)``.
        config: the tuned settings.
        recipe: the augmentation recipe (its mean/std normalize on the device).
        device: where batches are delivered.
        seed: seeds shuffling and the workers' augmentation (None: not reproducible).
        sampler: overrides shuffling (the trial runner passes one that never ends an epoch).
    """
    device = torch.device(device)
    if isinstance(dataset, Source):
        dataset = EncodedImageDataset(dataset, decoder=config.decoder, recipe=recipe)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    dataloader = DataLoader(
        dataset,
        shuffle=sampler is None,
        sampler=sampler,
        generator=generator,
        worker_init_fn=worker_init if config.num_workers else None,
        **{**config.loader_kwargs(), "pin_memory": config.pin_memory and device.type == "cuda"},
    )
    stage = DeviceStage(recipe, device, non_blocking=config.pin_memory)
    return TunedLoader(dataloader, stage, config)
