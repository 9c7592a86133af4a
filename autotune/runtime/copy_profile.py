"""The training process's share of the loader timed: the device stage (the copy to the
device and what follows it there) on whole batches, per sample.

Example:
    >>> tuned = loader.build(source, config, recipe=recipe, device=device)
    >>> profile_copy(tuned.dataloader, tuned.stage, sync=torch.cuda.synchronize)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from autotune.pipeline.batches import samples_in
from autotune.runtime.stages import StageTime


def profile_copy(
    batches: Iterable[Any],
    stage: Callable[[Any], Any],
    *,
    sync: Callable[[], None] = lambda: None,
    n_batches: int = 4,
    warmup: int = 1,
) -> StageTime:
    """Seconds per sample of the training process's share of the loader: ``stage`` (the
    copy to the device and what follows it there) on each of ``batches`` in turn, the device
    synchronized at the edges.

    Fresh batches, not one batch again and again: a repeated batch sits in the CPU's caches
    and reuses the memory of the last result, and measures a third of the real cost.
    CPU time is the whole process's: torch may normalize on several threads.
    """
    if n_batches < 1:
        raise ValueError(f"`n_batches >= 1` must hold, but got ({n_batches=}).")
    cpu = wall = 0.0
    samples = 0
    it = iter(batches)
    for repeat in range(warmup + n_batches):
        batch = next(it)
        sync()
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        staged = stage(batch)
        sync()
        if repeat >= warmup:
            cpu += time.process_time() - cpu_start
            wall += time.perf_counter() - wall_start
            samples += samples_in(staged)
    return StageTime(cpu / samples, wall / samples)
