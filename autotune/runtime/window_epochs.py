"""How a window meets epochs: after the warm-up, its sub-windows are either real epochs of
one pass each, as the user's run makes them (``time_epochs``), or run on inside the warm-up's
epoch, whose boundary is timed after them (``next_epoch``); ``time_sub_windows`` does
either.

Pure timing over an iterator of batches and a step (``run_window`` calls it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from statistics import median
from typing import Any

from autotune.runtime.peers import ALONE, Peers
from autotune.runtime.timed_spans import Batch, Count, Step, Tally, time_sets, time_sub_window
from autotune.runtime.window_length import SubWindows


def time_sub_windows(
    it: Iterator[Batch],
    batches: Iterable[Batch],
    step: Step,
    tally: Tally,
    count: Count,
    timing: dict[str, Any],
    shape: SubWindows,
    sets: dict[str, Any],
    pass_batches: int | None,
    *,
    end_epoch: Callable[[], None] | None,
    one_pass: Callable[[], None] | None,
    on_sub_window: Callable[[int, float], None] | None,
) -> tuple[int, dict[str, float | None]]:
    """The timed part after the warm-up, in ``shape``: real epochs (``time_epochs``); else
    the sub-windows one after another in the warm-up's epoch (from where a pass starts, where
    they are whole passes; ``skip`` batches untimed first), in ``sets`` (``timed_spans``),
    then its boundary (``next_epoch``: a whole epoch timed where a pass fits
    ``max_timed_s``). Returns the sub-windows grouped in each span of the last set, and the
    boundary's figures (``epoch_start_s``, ``epoch_overhead_s``)."""
    if shape.epochs and end_epoch is not None and one_pass is not None:
        epochs, batches_in_pass = shape.count * shape.epochs, shape.batches // shape.epochs
        ends = {"end_epoch": end_epoch, "one_pass": one_pass, "on_sub_window": on_sub_window}
        limits = {"max_timed_s": sets["max_timed_s"], "peers": sets["peers"], "head": shape.head}
        limits |= {"evidence_from": shape.epochs}  # a sub-window: one pass or more, long enough
        loop = (it, batches, step, tally, count, timing)
        return shape.epochs, time_epochs(*loop, epochs, batches_in_pass, **ends, **limits)
    for _ in range(shape.skip):  # the warm-up's rest, then on to where a pass starts: untimed
        step(next(it))
    spans = sets | {"sub_windows": shape.count, "batches_per_window": shape.batches}
    grouped = time_sets(it, step, tally, count, timing, on_sub_window=on_sub_window, **spans)
    whole = None  # a whole epoch where every rank's pass fits: one stepping alone waits forever
    if one_pass is not None and pass_batches:
        pass_s = pass_batches * tally.elapsed / tally.batches
        if not sets["peers"].any(not 0 < pass_s <= sets["max_timed_s"]):
            whole = one_pass
    sync, clock = timing["sync"], timing["clock"]
    return grouped, next_epoch(it, batches, step, end_epoch, whole, tally.rate, count, sync, clock)


def time_epochs(
    it: Iterator[Batch],
    batches: Iterable[Batch],
    step: Step,
    tally: Tally,
    count: Count,
    timing: dict[str, Any],
    epochs: int,
    pass_batches: int,
    *,
    end_epoch: Callable[[], None],
    one_pass: Callable[[], None],
    on_sub_window: Callable[[int, float], None] | None,
    max_timed_s: float,
    peers: Peers = ALONE,
    head: int = 0,
    evidence_from: int = 1,
) -> dict[str, float | None]:
    """Ends the warm-up's epoch (the batches in flight drained, untimed), then runs
    ``epochs`` real epochs of one pass each, as the user's run makes them, each from
    ``iter()`` to its end (``StopIteration``: where workers do not persist, they shut down
    there). Each epoch's batches after its first ``head`` (the workers' first round, which
    come together) to its last step done are a span of ``tally``: the steady rate, the
    spread; and the rate so far, from the ``evidence_from``-th epoch on where another
    follows, the pruner's evidence (``on_sub_window``); with no ``head``, the whole epoch
    from ``iter()`` is (too short to hold a flow apart from its start). Its first batch in
    hand (``epoch_start_s``) and what it took beyond its samples at the steady rate
    (``epoch_overhead_s``: its start, first round and end), medians over the epochs, are
    what each epoch pays at its boundary. No epoch starts
    that would end past ``max_timed_s`` at the epochs' pace so far (the warm-up's rate, which
    said they fit, may have been read off a buffer still full), the first always does."""
    sync, clock = timing["sync"], timing["clock"]
    end_epoch()
    for _ in it:  # the batches in flight: read, not stepped
        pass
    starts: list[float] = []
    seconds: list[float] = []
    while len(seconds) < epochs:
        one_pass()
        sync()
        begun = clock()
        epoch = _epoch(batches, starts, clock)  # begun by the first next()
        if head:  # in the epoch's time, not in the flow
            time_sub_window(epoch, step, head, Tally(), count, **timing)
        time_sub_window(epoch, step, pass_batches - head, tally, count, **timing)
        for _ in epoch:  # its end (none left in a pass): StopIteration
            pass
        sync()
        seconds.append(clock() - begun)
        late = sum(seconds) + median(seconds) > max_timed_s
        if len(seconds) == epochs or peers.any(late):  # every rank times as many
            break
        # a sub-window of whole epochs is a rate; after the last there is nothing to save
        if on_sub_window is not None and len(seconds) >= evidence_from:
            on_sub_window(len(tally.spans) - 1, tally.rate)
    per_epoch = tally.samples / len(seconds) * pass_batches / (pass_batches - head)
    overheads = [s - per_epoch / tally.rate for s in seconds]
    return {"epoch_start_s": median(starts), "epoch_overhead_s": median(overheads)}


def _epoch(
    batches: Iterable[Batch], starts: list[float], clock: Callable[[], float]
) -> Iterator[Batch]:
    """``batches``' next epoch, begun at the first ``next()``; the seconds to its first
    batch in hand go to ``starts``."""
    start = clock()
    epoch = iter(batches)
    first = next(epoch)
    starts.append(clock() - start)
    yield first
    yield from epoch


def next_epoch(
    it: Iterator[Batch],
    batches: Iterable[Batch],
    step: Step,
    end_epoch: Callable[[], None] | None,
    one_pass: Callable[[], None] | None,
    steady: float,
    count: Count,
    sync: Callable[[], None],
    clock: Callable[[], float],
) -> dict[str, float | None]:
    """Ends ``it``'s epoch, drains the batches in flight (untimed), and times what a user's
    epoch pays at the boundary (``epoch_start_s``): the end itself (workers that do not
    persist are shut down then) and a new epoch of ``batches`` to its first batch in hand;
    given ``one_pass`` (the new epoch made one pass: the run passes it where a pass fits
    ``max_timed_s`` at the rate timed), on to that epoch's last step done, as a user's epoch
    runs (``time_epoch``'s rule): what it took beyond its samples at the ``steady`` rate
    (``epoch_overhead_s``; below 0 where the pass ran faster). None without ``end_epoch``."""
    if end_epoch is None:
        return {"epoch_start_s": None, "epoch_overhead_s": None}
    end_epoch()
    while True:
        before = clock()
        try:
            next(it)
        except StopIteration:
            ending = clock() - before
            break
    if one_pass is None:
        start_s = ending + _first_batch_in_hand(iter(batches), sync=sync, clock=clock)
        return {"epoch_start_s": start_s, "epoch_overhead_s": None}
    one_pass()
    sync()
    start, in_hand, samples = clock(), None, 0
    for batch in batches:
        in_hand = clock() - start if in_hand is None else in_hand
        step(batch)
        samples += count(batch)
    sync()
    seconds = clock() - start
    # not clamped at 0: a pass that ran faster than the steady rate is the same noise as one
    # that ran slower, and a clamp would charge every claim (a baseline's most) the noise
    overhead = seconds - samples / steady if steady > 0 and samples else None
    start_s = ending + (seconds if in_hand is None else in_hand)
    return {"epoch_start_s": start_s, "epoch_overhead_s": overhead}


def _first_batch_in_hand(
    it: Iterator[Batch], *, sync: Callable[[], None], clock: Callable[[], float]
) -> float:
    """Seconds from here to the next batch of ``it`` in hand (an iterator starting: worker
    spawn or refill, and the first fill)."""
    sync()
    start = clock()
    next(it)
    return clock() - start
