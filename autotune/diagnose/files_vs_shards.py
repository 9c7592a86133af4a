"""Loose files against WebDataset shards of the same samples: the loader alone (no model)
reading each from storage (its files evicted from the page cache) and from the page cache,
in interleaved rounds. Both read through the tutorial's pipeline (PIL and transforms.v2,
``decoder=as_is``): the same work per sample, so what differs is how the bytes come off
storage: one open and a small read per sample, or a few long sequential reads.

A subset of the files is sharded (``SUBSET_FILES``, at most ``SUBSET_BYTES``), into a folder
beside the studies, written anew each time: the comparison must not cost a copy of a large
dataset.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path

from autotune.diagnose import page_cache
from autotune.diagnose.storage import STILL_CACHED, Measure, storage_window
from autotune.pipeline import shards
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.pipeline.sources import Source
from autotune.pipeline.user_data import UserData
from autotune.runtime.measurement import Measurement
from autotune.session import Session

SUBSET_FILES = 1024
SUBSET_BYTES = 512 * 2**20
ROUNDS = 2
SHARDS_PER_WORKER = 4  # so that every worker reads several shards in a window
FASTER = 1.15  # shards this much faster from storage, in every round: worth writing


@dataclass(frozen=True)
class FilesVsShards:
    """The loader alone over the same samples, as loose files and as shards, from storage
    (cold) and from the page cache (warm): one measurement per round each."""

    files_cold: tuple[Measurement, ...] = ()
    files_warm: tuple[Measurement, ...] = ()
    shards_cold: tuple[Measurement, ...] = ()
    shards_warm: tuple[Measurement, ...] = ()
    samples: int = 0
    shard_count: int = 0
    note: str = ""

    @property
    def cold_ratio(self) -> float:
        """Shards over loose files from storage: the ratio of their medians."""
        if not self.shards_cold or not self.files_cold:
            return 0.0
        shards_rate = statistics.median(m.samples_per_s for m in self.shards_cold)
        return shards_rate / statistics.median(m.samples_per_s for m in self.files_cold)

    @property
    def shards_pay(self) -> bool:
        """Shards read faster from storage than loose files by ``FASTER``, in every round."""
        pairs = list(zip(self.shards_cold, self.files_cold, strict=False))
        return bool(pairs) and all(s.samples_per_s >= FASTER * f.samples_per_s for s, f in pairs)


def measure(
    alone: Session, pipeline: PipelineConfig, rate: float, run: Measure, folder: Path
) -> FilesVsShards:
    """``alone`` (the session with no model) reading a subset of its image folder as loose
    files and as shards written into ``folder``; ``rate`` (above the loader's) sizes the
    window, which stays inside one pass over the subset."""
    source = alone.source
    assert isinstance(source, Source)
    subset = _subset(source, alone.conf.seed)
    reading = dataclasses.replace(pipeline, decoder=AS_IS)
    workers = max(1, reading.num_workers)
    window = storage_window(
        alone.conf.window,
        epoch_batches=len(subset) // reading.batch_size,
        buffered=reading.buffered_batches,
        align=workers,
        rate=rate,
        batch_size=reading.batch_size,
    )
    if window is None:
        return FilesVsShards(
            samples=len(subset),
            note=f"{len(subset)} files are too few for a timed window inside one pass: "
            "loose files and shards were not compared",
        )
    shutil.rmtree(folder, ignore_errors=True)
    per_shard = max(1, len(subset) // (SHARDS_PER_WORKER * workers))
    written = shards.write(subset, folder, samples_per_shard=per_shard, progress=False)
    tars = [str(folder / name) for name in written.shards]
    recipe = alone.conf.recipe
    kwargs = {"root": str(folder), "recipe": recipe.name, "crop_size": recipe.crop_size}
    stream = UserData.check("autotune.pipeline.shards.Shards", {**kwargs, "shuffle_buffer": 0})
    timed = dataclasses.replace(alone.conf, window=window)
    as_files = dataclasses.replace(alone.with_conf(timed), source=subset)
    as_shards = dataclasses.replace(alone.with_conf(timed), source=stream)
    runs = _rounds(
        run,
        (("loose files", as_files, subset.paths), (f"{len(tars)} shards", as_shards, tars)),
        reading,
    )
    if runs is None:
        shutil.rmtree(folder, ignore_errors=True)
        return FilesVsShards(
            samples=len(subset),
            shard_count=len(tars),
            note="the page cache could not be emptied here: loose files and shards were not "
            "compared from storage",
        )
    shutil.rmtree(folder, ignore_errors=True)
    (files_cold, files_warm), (shards_cold, shards_warm) = runs
    return FilesVsShards(
        files_cold,
        files_warm,
        shards_cold,
        shards_warm,
        samples=len(subset),
        shard_count=len(tars),
        note=f"{len(subset)} of the {len(source)} files, and the same samples as {len(tars)} "
        "shards, read through the tutorial's pipeline (the same work per sample)",
    )


Runs = tuple[tuple[Measurement, ...], tuple[Measurement, ...]]


def _rounds(
    run: Measure,
    readers: tuple[tuple[str, Session, tuple[str, ...] | list[str]], ...],
    pipeline: PipelineConfig,
) -> list[Runs] | None:
    """``ROUNDS`` interleaved rounds: each reader from storage (its files evicted), then from
    the page cache. Each reader's (cold, warm) runs; stops at a round with a failed run.
    None where the page cache could not be emptied."""
    cold: list[list[Measurement]] = [[] for _ in readers]
    warm: list[list[Measurement]] = [[] for _ in readers]
    for round_ in range(1, ROUNDS + 1):
        measured = []
        for name, session, paths in readers:
            if not page_cache.evict(paths, flush=True) or _still_cached(paths):
                return None
            measured.append(
                (
                    run(f"{name} from storage, round {round_}", session, pipeline),
                    run(f"{name} from the page cache, round {round_}", session, pipeline),
                )
            )
        if any(m is None for pair in measured for m in pair):
            break
        for i, (c, w) in enumerate(measured):
            cold[i].append(c)
            warm[i].append(w)
    return [(tuple(c), tuple(w)) for c, w in zip(cold, warm, strict=True)]


def _subset(source: Source, seed: int) -> Source:
    """Up to ``SUBSET_FILES`` files drawn across the source, at most ``SUBSET_BYTES``."""
    order = list(range(len(source)))
    random.Random(seed).shuffle(order)
    picked, total = [], 0
    for i in order[:SUBSET_FILES]:
        size = Path(source.paths[i]).stat().st_size
        if picked and total + size > SUBSET_BYTES:
            break
        picked.append(i)
        total += size
    picked.sort()
    return Source(
        source.root,
        tuple(source.paths[i] for i in picked),
        tuple(source.labels[i] for i in picked),
        source.classes,
    )


def _still_cached(paths: list[str] | tuple[str, ...]) -> bool:
    cached = page_cache.resident_fraction(paths[:: max(1, len(paths) // 256)])
    return cached is not None and cached > STILL_CACHED
