"""The timed part of a window: sub-windows of equal length, timed one after another, and the
spans they settle into: as many of them grouped as it takes for a set of spans to agree.

Pure timing over an iterator of batches and a step (``run_window`` calls it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from autotune.runtime.gpu_monitor import UtilizationSampler
from autotune.runtime.measurement import relative_spread
from autotune.runtime.peers import ALONE, Peers

Batch = Any  # what the loader yields: (images, labels), or the user's own batch
Step = Callable[[Batch], None]
Count = Callable[[Batch], int]  # samples in a batch
# sub-windows of one epoch timed before their rate so far is evidence the pruner may act on:
# one short span is no rate (a whole epoch is one: ``window_epochs.time_epochs``)
EVIDENCE_FROM = 2


def time_sets(
    it: Iterator[Batch],
    step: Step,
    tally: Tally,
    count: Count,
    timing: dict[str, Any],
    *,
    sub_windows: int,
    batches_per_window: int,
    target_spread: float,
    max_timed_s: float,
    on_sub_window: Callable[[int, float], None] | None,
    peers: Peers = ALONE,
) -> int:
    """Times sub-windows of ``batches_per_window`` until the last ``sub_windows`` spans of
    equal length agree within ``target_spread``, or the next sub-window would pass
    ``max_timed_s``. A span is ``grouped`` consecutive sub-windows, one more each time another
    set of ``sub_windows`` is timed: every sub-window counts again in the longer spans, where
    timing sets twice as long from scratch would throw the shorter ones away. The rate so far
    goes to ``on_sub_window`` after each sub-window from the ``EVIDENCE_FROM``-th on. Returns
    ``grouped``."""
    grouped = 1
    while True:
        for _ in range(sub_windows):
            time_sub_window(it, step, batches_per_window, tally, count, **timing)
            if on_sub_window is not None and len(tally.spans) >= EVIDENCE_FROM:
                on_sub_window(len(tally.spans) - 1, tally.rate)
        if target_spread <= 0 or sub_windows == 1:
            return grouped
        wide = relative_spread(tally.spans_of(grouped, sub_windows)) > target_spread
        per_sub_window = tally.elapsed / len(tally.spans)
        fits = tally.elapsed + sub_windows * per_sub_window <= max_timed_s
        if not peers.any(wide and fits):  # every rank times as many sub-windows
            return grouped
        grouped += 1


@dataclass
class Tally:
    """What the timed sub-windows saw so far."""

    spans: list[tuple[int, float]] = field(default_factory=list)  # each one's samples, seconds
    waited: float = 0.0  # seconds spent waiting for the next batch
    elapsed: float = 0.0  # seconds timed
    cpu: float = 0.0  # CPU seconds of this process
    samples: int = 0
    batches: int = 0

    @property
    def rates(self) -> list[float]:
        """Samples/s of each sub-window."""
        return [_rate(samples, seconds) for samples, seconds in self.spans]

    @property
    def rate(self) -> float:
        """Samples/s over everything timed so far."""
        return _rate(self.samples, self.elapsed)

    def add(self, samples: int, seconds: float, batches: int, waited: float) -> None:
        """One span more: ``samples`` in ``batches`` over ``seconds``, ``waited`` of them
        inside ``__next__``."""
        self.spans.append((samples, seconds))
        self.samples, self.batches = self.samples + samples, self.batches + batches
        self.elapsed, self.waited = self.elapsed + seconds, self.waited + waited

    def spans_of(self, grouped: int, count: int) -> list[float]:
        """Samples/s of the last ``count`` spans of ``grouped`` consecutive sub-windows."""
        last = self.spans[-grouped * count :]
        spans = [last[start : start + grouped] for start in range(0, len(last), grouped)]
        return [_rate(sum(n for n, _ in span), sum(s for _, s in span)) for span in spans]


def _rate(samples: int, seconds: float) -> float:
    return samples / seconds if seconds > 0 else float("inf")


def time_sub_window(
    it: Iterator[Batch],
    step: Step,
    n_batches: int,
    tally: Tally,
    count: Count,
    *,
    sync: Callable[[], None],
    clock: Callable[[], float],
    cpu_clock: Callable[[], float],
    gpu: UtilizationSampler | None,
) -> None:
    """Times one sub-window of ``n_batches`` and adds it to ``tally``."""
    samples = 0
    waited = tally.waited  # a local in the timed loop, summed in the same order as ever
    sync()
    if gpu is not None:
        gpu.start()
    cpu_start = cpu_clock()
    window_start = clock()
    for _ in range(n_batches):
        before = clock()
        batch = next(it)
        waited += clock() - before
        step(batch)
        samples += count(batch)
    sync()
    span = clock() - window_start
    tally.cpu += cpu_clock() - cpu_start
    if gpu is not None:
        gpu.stop()
    tally.waited = waited  # summed batch by batch above: nothing more to add to it
    tally.add(samples, span, n_batches, waited=0.0)
