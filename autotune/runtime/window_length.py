"""How long a timed window's parts are: the warm-up before timing, and each sub-window's
batches, in whole rounds of the workers and, where the data is small enough, whole passes
over it.

Pure arithmetic: ``run_window`` measures, this decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def warmup_batches(buffered_batches: int, extra: int) -> int:
    """Batches to run before timing: drain the prefetch buffer, then a few at the true rate.

    A window that starts right after start-up drains ``num_workers * prefetch_factor`` ready
    batches and reports a rate the pipeline cannot sustain, rewarding big prefetch factors.
    """
    return buffered_batches + extra


@dataclass(frozen=True)
class SubWindows:
    """The shape of the timed part: each sub-window's batches, and the untimed batches run
    first so that the first sub-window starts where a pass over the data starts; or, where
    the run can make epochs, ``epochs`` real epochs of one pass each to a sub-window."""

    batches: int
    skip: int = 0
    whole_passes: bool = False
    epochs: int = 0  # real epochs (one pass each) to a sub-window; 0: all in one epoch
    # of each real epoch, the batches of the workers' first round: they come together (each
    # worker's first), so the steady rate is the flow after them; 0 where the epoch is too
    # short to hold a flow as long (the steady rate is then the epoch's own)
    head: int = 0
    count: int = 1  # sub-windows in a set


def sub_windows(
    *,
    at_least: int,
    batch_rate: float | None,
    min_sub_window_s: float,
    align: int,
    consumed: int,
    pass_batches: int | None,
    count: int,
    max_timed_s: float,
    drain: int = 0,
    makes_epochs: bool = False,
    epoch_count: int | None = None,
) -> SubWindows:
    """Sub-windows of at least ``at_least`` batches and ``min_sub_window_s`` seconds at
    ``batch_rate`` (batches/s seen at the end of the warm-up; None: unknown), in whole rounds
    of ``align`` workers (they deliver batches round-robin, in bursts).

    Where a pass over the data is ``pass_batches`` long (the sampler's passes are whole
    batches, and the loader hands batches back in its order) and ``count`` sub-windows of
    whole passes fit in ``max_timed_s``, each sub-window is whole passes: every sub-window
    then reads every sample once, as an epoch does, and uneven samples (a thumbnail beside a
    camera original) no longer make sub-windows disagree by which of them each drew. Where
    the run ``makes_epochs``, each pass is a real epoch, as the user's run makes them (no
    worker rounds to align: an epoch ends where it ends), ``epoch_count`` sub-windows of them
    (None: ``count``); else the sub-windows start where a pass starts (``consumed`` batches
    are gone, so ``skip`` more are run untimed first).
    ``drain``: batches of the warm-up not run yet (a full prefetch buffer's, left out where
    the sub-windows might have been real epochs): where they are not, they open ``skip``.
    """
    needed = math.ceil(min_sub_window_s * batch_rate) if batch_rate and min_sub_window_s else 0
    wanted = max(at_least, needed, 1)
    if pass_batches:
        unit = pass_batches if makes_epochs else math.lcm(max(1, align), pass_batches)
        batches = -(-wanted // unit) * unit
        spans = (epoch_count or count) if makes_epochs else count
        if batch_rate and spans * batches / batch_rate <= max_timed_s:
            if makes_epochs:
                head = align if pass_batches >= 2 * align else 0
                epochs = batches // pass_batches
                return SubWindows(
                    batches, whole_passes=True, epochs=epochs, head=head, count=spans
                )
            skip = drain + -(consumed + drain) % pass_batches
            return SubWindows(batches, skip=skip, whole_passes=True, count=count)
    unit = max(1, align)
    return SubWindows(-(-wanted // unit) * unit, skip=drain, count=count)
