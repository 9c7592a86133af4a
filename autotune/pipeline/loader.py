"""build(): the one builder both the trial runner and users' training scripts call.

What was measured is what the user gets: a trial and ``autotune.build_loader`` go through
the same ``build`` with the same ``PipelineConfig``.

Where each step runs, by setting:

================================  ======================  ===============================
setting                           workers return          the device stage does
================================  ======================  ===============================
augment_on=cpu, transfer=uint8    uint8 crops             copy, normalize
augment_on=cpu, transfer=float    normalized float32      copy
augment_on=gpu                    whole decoded images    copy, crop/resize/flip, normalize
decoder=nvjpeg                    encoded bytes           copy, decode, augment, normalize
decoder=as_is                     the Dataset's output    copy (``.to(device)``), as it is
================================  ======================  ===============================
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import cv2
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler, default_collate

from autotune.errors import UsageError
from autotune.pipeline import decoders, tutorial
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.dali import DaliLoader
from autotune.pipeline.device_stage import DeviceStage, Normalize
from autotune.pipeline.prepared import DecodedPixels, PreparedCopy
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.side_stream import prefetch_on_side_stream
from autotune.pipeline.sources import Source
from autotune.pipeline.streams import Repeating
from autotune.pipeline.user_data import UserData

log = logging.getLogger(__name__)

Batch = tuple[Any, torch.Tensor]


class EncodedImageDataset(Dataset):
    """Reads one sample of a ``Source`` (or of a decoded copy of one: its pixels, no decode)
    and does the workers' share of the pipeline.

    Returns ``(image, label)``; what ``image`` is depends on the settings (module docstring).
    """

    def __init__(
        self, source: Source | DecodedPixels, *, recipe: Recipe, config: PipelineConfig
    ) -> None:
        decoders.DECODERS[config.decoder]  # fail here, not in a worker, on an unknown name
        self.source, self.recipe, self.decoder_name = source, recipe, config.decoder
        self.on_device = decoders.DECODERS[config.decoder].on_device
        self.augment_on = config.augment_on
        self.normalize = Normalize(recipe) if config.transfer == "float" else None
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
                return self._prepare(self.source.read(i), self._decoder), self.source.labels[i]
            except (OSError, ValueError, RuntimeError) as exc:
                if self.source.paths[i] not in self._bad:
                    self._bad.add(self.source.paths[i])
                    log.warning("skipping %s: %s", self.source.paths[i], exc)
        raise ValueError(f"no image of {self.source.root} could be decoded")

    def _prepare(self, data: bytes | torch.Tensor, decoder: decoders.Decoder) -> torch.Tensor:
        if isinstance(data, torch.Tensor):  # a decoded copy's pixels
            if self.on_device or self.augment_on == "gpu":
                return data
            image = self.recipe.from_pixels(data)
            return self.normalize(image) if self.normalize is not None else image
        if self.on_device:
            width, height, orientation = decoders.probe(data)  # a damaged header fails here
            if data[:2] == b"\xff\xd8" and orientation == 1:
                return torch.frombuffer(bytearray(data), dtype=torch.uint8)  # 1-D: encoded
            return self.recipe.decode_for_device(data, decoder)  # 3-D: decoded here
        if self.augment_on == "gpu":
            return self.recipe.decode_for_device(data, decoder)
        image = self.recipe(data, decoder)
        return self.normalize(image) if self.normalize is not None else image

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_decoder": None}  # decoder libraries stay per process


def collate_list(samples: list[tuple[torch.Tensor, int]]) -> Batch:
    """Images of different sizes stay a list (the device stage crops them); labels stack."""
    return [image for image, _ in samples], torch.tensor([label for _, label in samples])


def worker_init(worker_id: int) -> None:
    """One thread per worker: N workers each running N threads oversubscribe a small host."""
    torch.set_num_threads(1)
    cv2.setNumThreads(0)


class TunedLoader:
    """A DataLoader plus the device stage: yields batches ready for the model.

    Example:
        >>> loader = autotune.build_loader(source, "studies/synthetic-tiny/best.yaml")
        >>> for images, labels in loader:
        ...     loss = criterion(model(images), labels)
    """

    def __init__(self, dataloader: DataLoader, stage: DeviceStage, config: PipelineConfig):
        self.dataloader, self.stage, self.config = dataloader, stage, config
        self.prefetches = config.device_prefetch and stage.device.type == "cuda"

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # a generator function, not a generator expression: the DataLoader's workers must
        # start inside the first next(), where the trial's clock for start-up runs
        if self.prefetches:
            yield from prefetch_on_side_stream(self.dataloader, self.stage)
            return
        for batch in self.dataloader:
            yield self.stage(batch)

    def __len__(self) -> int:
        return len(self.dataloader)


def build(
    dataset: Dataset | Source | UserData,
    config: PipelineConfig,
    *,
    recipe: Recipe,
    device: torch.device | str = "cpu",
    seed: int | None = 0,
    sampler: Sampler[int] | Sequence[int] | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    repeat: bool = False,
    prepared: PreparedCopy | None = None,
) -> TunedLoader:
    """Builds the loader a ``PipelineConfig`` describes.

    Args:
        dataset: a ``Source`` (read, decoded and augmented as ``config`` says) or your own
            Dataset returning ``(uint8 CHW tensor, label)``: the finished crop, or with
            ``augment_on=gpu`` the whole decoded image (any size; cropped on the device).
            With ``decoder=as_is`` your Dataset's samples go to the device as they come
            (a ``Source`` is read by the tutorial's ImageFolder and transforms).
        config: the tuned settings.
        recipe: the augmentation recipe (its mean/std normalize on the device).
        device: where batches are delivered.
        seed: seeds shuffling and the augmentation (None: not reproducible).
        sampler: overrides shuffling (the trial runner passes one that never ends an epoch).
        collate_fn: your Dataset's own collate, read as it is (``decoder=as_is``).
        repeat: an iterable Dataset is read again and again, each worker its own share (the
            trial runner's window, where no epoch ends; a map-style one gets a sampler).
        prepared: the prepared copy of the Source ``config.cache`` names (``prepared.ensure``).
    """
    device = torch.device(device)
    reading = {"recipe": recipe, "device": device, "seed": seed, "sampler": sampler}
    if config.as_is:  # no worker hook: DataLoader gives each worker one thread
        dataset, collate_fn = _as_it_is(dataset, recipe, collate_fn)
        if repeat and isinstance(dataset, IterableDataset):
            dataset = Repeating(dataset)
        return _tuned(dataset, config, collate_fn=collate_fn, worker_init_fn=None, **reading)
    if isinstance(dataset, UserData):
        raise UsageError(
            f"decoder={config.decoder}: the tuner's decoders read image folders; your own "
            f"Dataset ({dataset.target}) is read as it is (decoder=as_is)"
        )
    if config.cache != "none":
        dataset = _prepared_data(dataset, config, prepared)
    if decoders.DECODERS[config.decoder].replaces_loader:
        if not isinstance(dataset, Source):
            raise TypeError("decoder=dali reads the files itself: pass a Source or a folder")
        return DaliLoader(dataset, config, **reading)  # type: ignore[return-value]
    if isinstance(dataset, (Source, DecodedPixels)):
        dataset = EncodedImageDataset(dataset, recipe=recipe, config=config)
    return _tuned(
        dataset,
        config,
        collate_fn=collate_list if config.augment_on == "gpu" else default_collate,
        worker_init_fn=worker_init if config.num_workers else None,
        **reading,
    )


def _prepared_data(
    dataset: Dataset | Source, config: PipelineConfig, prepared: PreparedCopy | None
) -> Source | DecodedPixels:
    """What the workers read in place of ``dataset``: its prepared copy."""
    if not isinstance(dataset, Source):
        raise UsageError(
            f"cache={config.cache} prepares a copy of an image folder; a Dataset of your own "
            "is read as it is: use cache=none"
        )
    if prepared is None or prepared.kind != config.cache:
        raise UsageError(
            f"cache={config.cache}: pass the prepared copy (prepared.ensure), or use "
            "autotune.build_loader, which prepares it"
        )
    return prepared.data()


def _as_it_is(
    dataset: Dataset | Source | UserData,
    recipe: Recipe,
    collate_fn: Callable[[list[Any]], Any] | None,
) -> tuple[Dataset, Callable[[list[Any]], Any] | None]:
    """What is read as it is, and its collate: the Dataset and the collate it came with (a
    folder: the tutorial's ImageFolder and DataLoader's default)."""
    if isinstance(dataset, UserData):
        return dataset.open()
    if isinstance(dataset, Source):
        return tutorial.tutorial_dataset(dataset, recipe), collate_fn
    return dataset, collate_fn


def _tuned(
    dataset: Dataset,
    config: PipelineConfig,
    *,
    collate_fn: Callable[[list[Any]], Any] | None,
    worker_init_fn: Callable[[int], None] | None,
    recipe: Recipe,
    device: torch.device,
    seed: int | None,
    sampler: Sampler[int] | Sequence[int] | None,
) -> TunedLoader:
    """A DataLoader of ``config``'s arguments over ``dataset`` (shuffled from ``seed`` unless
    a sampler is given or it is a stream; pinned only for a CUDA device), and the device
    stage after it."""
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    ordered = {} if isinstance(dataset, IterableDataset) else {"shuffle": sampler is None}
    dataloader = DataLoader(
        dataset,
        **ordered,
        sampler=sampler,
        generator=generator,
        collate_fn=collate_fn,
        worker_init_fn=worker_init_fn,
        **{**config.loader_kwargs(), "pin_memory": config.pin_memory and device.type == "cuda"},
    )
    return TunedLoader(dataloader, DeviceStage(recipe, device, config, seed=seed), config)
