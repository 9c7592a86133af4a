"""How long ``autotune.DataLoader`` times a setting within the loop's epochs: its sub-windows'
length, from the rate at the end of its warm-up, fitted to what an epoch (or a pass the loop
leaves early) leaves after the warm-up; and the fewest batches of one that can time it. The
rules are a trial's (``runtime.window_length``).
"""

from __future__ import annotations

import dataclasses

from autotune.pipeline.config import PipelineConfig
from autotune.runtime.window_length import sub_windows, warmup_batches
from autotune.schema import WindowConfig


def fewest_batches(settings: PipelineConfig, window: WindowConfig) -> int:
    """The fewest batches of one epoch that can time ``settings``: an epoch's warm-up (its
    first batch, then the extra ones) and one sub-window at its shortest, in whole rounds of
    its workers. Every epoch warms up anew: an epoch shorter than this never times it."""
    return _epoch_warmup(window) + _shortest(settings, window)


def capped(window: WindowConfig, cap_s: float) -> WindowConfig:
    """``window`` timing no more than ``cap_s`` (0: no cap; the explorer's budget shared
    among the settings it tries), where that is shorter: its sub-windows shortened with it."""
    if not 0 < cap_s < window.max_timed_s:
        return window
    shortest = min(window.min_sub_window_s, cap_s / window.sub_windows)
    return dataclasses.replace(window, max_timed_s=cap_s, min_sub_window_s=shortest)


def sub_window_batches(
    settings: PipelineConfig,
    window: WindowConfig,
    batch_rate: float | None,
    *,
    epoch_batches: int | None,
    whole_epoch: bool,
) -> int:
    """Batches per sub-window of ``settings`` at ``batch_rate`` (None: not known), in whole
    rounds of its workers; where ``epoch_batches`` can be timed of an epoch, no more than it
    leaves after its warm-up (``whole_epoch``: for a whole set of sub-windows, the setting
    running the epoch), and no fewer than the shortest."""
    align = max(1, settings.num_workers)
    length = sub_windows(
        at_least=window.batches_per_window, batch_rate=batch_rate, align=align,
        min_sub_window_s=window.min_sub_window_s, consumed=0, pass_batches=None,
        count=window.sub_windows, max_timed_s=window.max_timed_s,
    ).batches  # fmt: skip
    if epoch_batches is None:
        return length
    sets = window.sub_windows if whole_epoch else 1
    room = (epoch_batches - _epoch_warmup(window)) // sets // align * align  # whole rounds
    return min(length, max(_shortest(settings, window), room))


def _epoch_warmup(window: WindowConfig) -> int:  # its first batch, then the extra ones
    return warmup_batches(1, window.warmup_extra_batches)


def _shortest(settings: PipelineConfig, window: WindowConfig) -> int:
    return sub_windows(
        at_least=window.batches_per_window, batch_rate=None, min_sub_window_s=0.0,
        align=max(1, settings.num_workers), consumed=0, pass_batches=None,
        count=window.sub_windows, max_timed_s=window.max_timed_s,
    ).batches  # fmt: skip
