"""A dataset as WebDataset tar shards: written once from any source, read back as a stream in
large sequential reads (one file per shard, not one per sample), split by rank and by
DataLoader worker, with a shuffle buffer.

An image source's shards hold each file's encoded bytes as they were (``.jpg``, ``.png``...)
and its class (``.cls``); a Dataset of your own is written sample by sample, pickled
(``.pyd``), and read back as it was. ``shards.json`` beside the tars says what they hold.

Example:
    >>> write(source, Path("/data/shards"))          # or: python -m autotune.shard ...
    >>> loader = DataLoader(Shards("/data/shards", crop_size=224), batch_size=64,
    ...                     num_workers=8)
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import webdataset as wds
from PIL import Image
from torch.utils.data import IterableDataset
from tqdm import tqdm

from autotune.errors import UsageError
from autotune.pipeline import recipes
from autotune.pipeline.sources import Source
from autotune.pipeline.user_data import UserData
from autotune.schema import RecipeConfig

MANIFEST = "shards.json"
PATTERN = "shard-%06d.tar"


@dataclass(frozen=True)
class Written:
    """What ``write`` wrote: the folder, the shard files and the samples in each."""

    folder: Path
    shards: tuple[str, ...]
    counts: tuple[int, ...]

    @property
    def samples(self) -> int:
        return sum(self.counts)


def _samples(data: Source | UserData) -> Iterator[dict[str, Any]]:
    """Each sample as a WebDataset record (its key and its fields)."""
    if isinstance(data, Source):
        for i, path in enumerate(data.paths):
            suffix = Path(path).suffix.lower().lstrip(".")
            yield {"__key__": f"{i:09d}", suffix: data.read(i), "cls": data.labels[i]}
        return
    dataset, _ = data.open()
    # a map-style Dataset by its length (iterating one need not end), a stream once through
    samples = iter(dataset) if data.iterable else (dataset[i] for i in range(len(dataset)))
    for i, sample in enumerate(samples):
        yield {"__key__": f"{i:09d}", "pyd": sample}


def write(
    data: Source | UserData, folder: Path, *, samples_per_shard: int = 1000, progress: bool = True
) -> Written:
    """Writes ``data`` into ``folder`` as tar shards of ``samples_per_shard`` samples each, and
    ``shards.json``. Refuses a folder that already holds shards: nothing is overwritten."""
    if samples_per_shard < 1:
        raise UsageError(f"samples_per_shard must be >= 1, got {samples_per_shard}")
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise UsageError(f"{folder} is not empty: write the shards into a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    counts: list[int] = []
    with wds.ShardWriter(str(folder / PATTERN), maxcount=samples_per_shard, verbose=0) as sink:
        for record in tqdm(_samples(data), total=len(data), disable=not progress, unit="sample"):
            if not counts or counts[-1] == samples_per_shard:
                counts.append(0)
            sink.write(record)
            counts[-1] += 1
    shards = tuple(PATTERN % i for i in range(len(counts)))
    manifest = {
        "kind": "images" if isinstance(data, Source) else "samples",
        "samples": sum(counts),
        "classes": list(data.classes),
        "shards": list(shards),
        "counts": counts,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return Written(folder, shards, tuple(counts))


def _image_sample(recipe: recipes.Recipe) -> Any:
    """A record's encoded image decoded with PIL and put through the recipe's transforms (as
    the tutorial's ImageFolder pipeline reads a file), with its class."""
    transform = recipe.tutorial_transform()

    def to_sample(record: dict[str, Any]) -> tuple[Any, int]:
        encoded = next(v for k, v in record.items() if not k.startswith("__") and k != "cls")
        image = Image.open(io.BytesIO(encoded)).convert("RGB")
        return transform(image), int(record["cls"])

    return to_sample


class Shards(IterableDataset):
    """The shards in ``root`` as a stream: each epoch, the shard order shuffled by ``seed``
    and the epoch (the same on every rank), then split by rank (``RANK``/``WORLD_SIZE``, as
    torchrun sets them) and by DataLoader worker, so every sample is read once per epoch by
    one worker of one rank; samples mixed in a buffer of ``shuffle_buffer`` (0: in order).

    Image shards come out as ``(image tensor, class)`` through ``recipe`` at ``crop_size``;
    shards of your own samples as the samples were.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        recipe: str = "imagenet_train",
        crop_size: int = 224,
        shuffle_buffer: int = 1000,
        seed: int = 0,
    ) -> None:
        self.root = Path(root).expanduser()
        manifest = self.root / MANIFEST
        if not manifest.is_file():
            raise UsageError(
                f"{self.root} has no {MANIFEST}: write shards with python -m autotune.shard"
            )
        self.manifest = json.loads(manifest.read_text())
        self.classes = tuple(self.manifest["classes"])
        self.recipe = RecipeConfig(name=recipe, crop_size=crop_size)
        self.shuffle_buffer, self.seed, self.epoch = shuffle_buffer, seed, 0

    def buffer_bytes(self) -> int:
        """Bytes each reading process holds in its shuffle buffer: ``shuffle_buffer`` records
        of the shards' mean size (the buffer holds them encoded, before the recipe)."""
        total = sum((self.root / name).stat().st_size for name in self.manifest["shards"])
        return self.shuffle_buffer * total // max(1, self.manifest["samples"])

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose shard order the next ``iter()`` reads (as DistributedSampler's)."""
        self.epoch = epoch

    def _shard_order(self) -> list[str]:
        names = list(self.manifest["shards"])
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(names)
        return [str(self.root / name) for name in names]

    def __len__(self) -> int:
        """Samples this rank reads per epoch (all of them outside a distributed job)."""
        rank, world, _, _ = wds.utils.pytorch_worker_info()
        return sum(self.manifest["counts"][rank::world])

    def __iter__(self) -> Iterator[Any]:
        stages: list[Any] = [
            wds.SimpleShardList(self._shard_order()),
            wds.split_by_node,
            wds.split_by_worker,
            wds.tarfile_to_samples(),
        ]
        if self.shuffle_buffer > 0:
            stages.append(wds.shuffle(self.shuffle_buffer, initial=self.shuffle_buffer))
        if self.manifest["kind"] == "images":
            stages.append(wds.map(_image_sample(recipes.from_config(self.recipe))))
        else:
            stages += [wds.decode(), wds.map(lambda record: record["pyd"])]
        self.epoch += 1  # the next epoch's order, where this object reads again
        return iter(wds.DataPipeline(*stages))
