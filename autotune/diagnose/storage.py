"""Storage against CPU: the loader alone with its files evicted from the page cache, then
cached, over the same window and the same files.

A run with the files evicted reads every file from storage (no file twice); its twin, with the
same seed, reads the same files in the same order, now cached by the first. The rounds are
interleaved (cold, warm, cold, warm): one pair is noise on a shared machine.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune.diagnose import page_cache
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.measurement import Measurement
from autotune.runtime.stages import StageTime, pick
from autotune.runtime.window_length import warmup_batches
from autotune.schema import WindowConfig
from autotune.session import Session

IO_MARGIN = 0.15  # cold must be this much slower than warm, in every round: I/O-bound
RESIDENCY_CHECK_FILES = 256  # files whose pages mincore checks after an eviction
READ_TIMING_FILES = 128  # files read cold, then warm, to time a read from storage
STORAGE_ROUNDS = 2  # cold, warm, cold, warm
STILL_CACHED = 0.05  # an eviction that leaves more of the pages cached did not take
SLOW_READ_S = 1e-3  # a file read slower than this from storage, and
UNCACHED_SHARE = 0.8  # at least this share of it from the page cache: never cached

# one labelled child-process run of a pipeline; None when it failed (the caller notes why)
Measure = Callable[[str, Session, PipelineConfig], Measurement | None]


@dataclass(frozen=True)
class Storage:
    """The same loader-only run from storage (files evicted) and from the page cache, in
    interleaved rounds (cold, warm, cold, warm): one pair is noise on a shared machine."""

    cold: tuple[Measurement, ...] = ()
    warm: tuple[Measurement, ...] = ()
    read_cold: StageTime | None = None  # seconds per file, read here one after the other
    read_warm: StageTime | None = None
    cached_after_eviction: float | None = None  # share of the pages mincore still saw
    dataset_bytes: int = 0
    fits_in_cache: bool = False  # the page cache can hold the dataset: I/O in epoch 1 only
    note: str = ""

    @staticmethod
    def _median(runs: tuple[Measurement, ...]) -> float | None:
        return statistics.median(m.samples_per_s for m in runs) if runs else None

    @property
    def cold_samples_per_s(self) -> float | None:
        return self._median(self.cold)

    @property
    def warm_samples_per_s(self) -> float | None:
        return self._median(self.warm)

    @property
    def never_cached(self) -> bool:
        """Reads as slow from the page cache as from storage (and slow): the file system
        answers every read from storage (a FUSE mount, some network file systems), so the
        runs 'from the page cache' read from storage too."""
        cold, warm = self.read_cold, self.read_warm
        return (
            cold is not None
            and warm is not None
            and cold.wall_s >= SLOW_READ_S
            and warm.wall_s >= UNCACHED_SHARE * cold.wall_s
        )

    @property
    def io_bound(self) -> bool | None:
        """True when every round ran slower from storage than from memory by more than
        ``IO_MARGIN``; None when storage was not compared."""
        if not self.cold or len(self.cold) != len(self.warm):
            return None
        return all(
            c.samples_per_s < (1 - IO_MARGIN) * w.samples_per_s
            for c, w in zip(self.cold, self.warm, strict=True)
        )


def storage_window(
    window: WindowConfig,
    *,
    epoch_batches: int,
    buffered: int,
    align: int,
    rate: float,
    batch_size: int,
) -> WindowConfig | None:
    """``window`` with a fixed number of batches, all inside the first pass over the data.

    Run with the files evicted, every read comes from storage (no file twice); run again with
    the same seed, the same files are read in the same order, now cached by the first run.
    Sub-windows are as long as ``min_sub_window_s`` makes them at ``rate`` samples/s (a rate
    above the loader's is safe), shortened for a small dataset; None when not one batch fits
    after the warm-up.
    """
    warmup = warmup_batches(buffered, window.warmup_extra_batches)
    per_window = max(
        window.batches_per_window, math.ceil(window.min_sub_window_s * rate / batch_size)
    )
    per_window = -(-per_window // align) * align
    sub_windows = window.sub_windows
    # the first batch, the warm-up, the timed batches, and what the workers fetch ahead
    budget = epoch_batches - 1 - warmup - buffered
    if sub_windows * per_window > budget:
        per_window = align * max(1, budget // (sub_windows * align))
        sub_windows = min(sub_windows, budget // per_window)
    if sub_windows < 1:
        return None
    return WindowConfig(
        warmup_extra_batches=window.warmup_extra_batches,
        sub_windows=sub_windows,
        batches_per_window=per_window,
        min_sub_window_s=0.0,
        target_spread=0.0,  # the batches fixed: all inside the first pass
        # no longer than the timed batches at ``rate``: a pass takes longer, so sub-windows
        # are never rounded up to whole passes, real epochs or a whole epoch timed at the
        # boundary, whose second pass would read the files a cold run has just cached
        max_timed_s=sub_windows * per_window * batch_size / rate,
    )


def measure_storage(
    alone: Session,
    pipeline: PipelineConfig,
    rate: float,
    measure: Measure,
    *,
    dataset_bytes: int,
    fits: bool,
    paths: list[str],
) -> Storage:
    """The loader alone (``alone``: the session with no model) from storage, then from the
    page cache, over the same window and the same files (``paths``: what the loader reads,
    the dataset's or its prepared copy's), in ``STORAGE_ROUNDS`` interleaved rounds.
    ``rate`` sizes the window: a rate above the loader's is safe."""
    facts: dict[str, Any] = {"dataset_bytes": dataset_bytes, "fits_in_cache": fits}
    if not page_cache.evict(paths):
        return Storage(**facts, note="posix_fadvise is not available here: storage not compared")
    facts.update(_time_reads_and_evict(paths, alone.conf.seed))
    cached = facts["cached_after_eviction"]
    if cached is not None and cached > STILL_CACHED:
        return Storage(
            **facts,
            note=f"eviction did not take ({cached:.0%} of the pages stayed cached: tmpfs, or a "
            "file system that ignores posix_fadvise): storage was not compared",
        )
    window = storage_window(
        alone.conf.window,
        epoch_batches=len(alone.source) // pipeline.batch_size,
        buffered=pipeline.buffered_batches,
        align=max(1, pipeline.num_workers),
        rate=rate,
        batch_size=pipeline.batch_size,
    )
    cold, warm = _rounds(alone, pipeline, window, measure) if window else ((), ())
    if fits:
        page_cache.warm(paths)  # back to the steady state the other runs see
    if window is None:
        return Storage(
            **facts,
            note=f"{len(alone.source)} files are too few for a timed window inside one pass "
            "over them: the loader was not run from storage",
        )
    return Storage(cold, warm, **facts, note=_window_note(window, len(alone.source)))


def _time_reads_and_evict(paths: list[str], seed: int) -> dict[str, Any]:
    """Reads of single files timed cold, then warm; then every file evicted, and how much of
    them the page cache still holds (``read_cold``, ``read_warm``, ``cached_after_eviction``)."""
    # in random order, as a shuffling sampler reads them: no read-ahead into the next file
    timed = [paths[i] for i in pick(len(paths), READ_TIMING_FILES, seed)]
    random.Random(seed).shuffle(timed)
    read_cold = page_cache.time_reads(timed)
    read_warm = page_cache.time_reads(timed)
    page_cache.evict(timed)
    checked = paths[:: max(1, len(paths) // RESIDENCY_CHECK_FILES)]
    cached = page_cache.resident_fraction(checked)
    if cached is not None and cached > STILL_CACHED:  # dirty pages (just written) stay: flush
        page_cache.evict(paths, flush=True)
        cached = page_cache.resident_fraction(checked)
    return {"read_cold": read_cold, "read_warm": read_warm, "cached_after_eviction": cached}


def _rounds(
    alone: Session, pipeline: PipelineConfig, window: WindowConfig, measure: Measure
) -> tuple[tuple[Measurement, ...], tuple[Measurement, ...]]:
    """``STORAGE_ROUNDS`` pairs of runs over ``window``, from storage then from the page
    cache; stops at the first pair with a failed run."""
    same = alone.with_conf(dataclasses.replace(alone.conf, window=window))
    paths = list(alone.source.paths)
    cold: list[Measurement] = []
    warm: list[Measurement] = []
    for round_ in range(1, STORAGE_ROUNDS + 1):
        if round_ > 1:
            page_cache.evict(paths)
        label = f"the loader alone from storage (files evicted), round {round_}"
        c = measure(label, same, pipeline)
        # the same seed reads the same files: the cold run has just cached them
        w = measure(f"the loader alone from the page cache, round {round_}", same, pipeline)
        if c is None or w is None:
            break
        cold.append(c)
        warm.append(w)
    return tuple(cold), tuple(warm)


def _window_note(window: WindowConfig, files: int) -> str:
    return (
        f"each run timed {_count(window.sub_windows, 'sub-window')} of "
        f"{_count(window.batches_per_window, 'batch')} inside one pass over the {files} "
        "files: every read of a cold run came from storage, and its page-cache twin read the "
        "same files"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith('ch') else 's'}"
