"""What ``autotune.DataLoader`` measures of the training loop it feeds: each setting's
samples/s over spans of the loop's own batches (its step, optimizer, precision and logging
inside), the share of time spent waiting inside ``__next__``, and what a switch cost.

The rules are a trial's (``runtime.window_length``: a warm-up that drains the prefetch buffer,
then sub-windows of whole rounds of the workers and at least a minimum time;
``runtime.timed_spans.Tally``: spans grouped until a set of them agrees within the target
spread, or the time runs out; ``tuner.ways.beaten``: a proposal whose rate so far is clearly
below the best so far stops once it has evidence, as the study prunes it), observed from
inside the loop rather than driving it: a sub-window runs from one batch's request to the
request after its last batch, so the step of each batch is inside it. An epoch's end (where
the loop may validate or save), or a pause of the loop's own (``pauses``), ends the
sub-window in progress untimed, and the loop warms up anew.

The run's first warm-up, and a pause's, drain the prefetch buffer the workers filled while
the loop was slow (its first steps: allocations, kernel choice, compiling) or elsewhere. An
epoch's start, or a switch, begins with an empty buffer, as a trial's epochs do: its warm-up
is its first batch (whose wait is that start's cost) and the window's extra ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from autotune.online.loader_cpu import LoaderTime
from autotune.online.pauses import StepWatch
from autotune.online.reading import Reading
from autotune.online.sub_window import capped, fewest_batches, sub_window_batches
from autotune.pipeline.batches import samples_in
from autotune.pipeline.config import PipelineConfig
from autotune.runtime import sched
from autotune.runtime.measurement import relative_spread
from autotune.runtime.sched import ZERO, CpuTimes
from autotune.runtime.timed_spans import EVIDENCE_FROM, Tally
from autotune.runtime.window_length import warmup_batches
from autotune.schema import WindowConfig
from autotune.tuner.ways import beaten


class Meter:
    """Measures one setting from the batches the loop asks for: ``requested`` when the loop
    asks for a batch, ``received`` when it has it, ``epoch_ended`` between epochs."""

    # its first span's start, and the loop's time between epochs till then
    _began: tuple[float, float] | None = None

    def __init__(
        self,
        settings: PipelineConfig,
        window: WindowConfig,
        *,
        after_switch: bool = True,
        drain: bool = False,
        cap_s: Callable[[float], float] | None = None,
        epoch_batches: int | None = None,
        whole_epoch: bool = False,
        rival: float | None = None,
        timed_before: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        count: Callable[[Any], int] = samples_in,
        workers_cpu: Callable[[], CpuTimes | None] = lambda: None,
        thread_cpu: Callable[[], CpuTimes] = sched.thread_times,
        process_cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.settings = settings
        # an epoch's batches, where known: a sub-window is never longer than what an epoch
        # leaves after its warm-up (a fast loop on a small dataset would time none)
        self._epoch_batches = epoch_batches
        # the setting runs whole epochs (a switch waits for the next): a set of sub-windows
        # is sized to fit in one, its epoch's end taking the reading as it stands (``cut``)
        self._whole_epoch = whole_epoch
        # a proposal's: the best rate so far (samples/s), which a clearly slower one stops at
        self._rival, self.beaten_after = rival, 0
        self._after_switch = after_switch  # its first batch is the switch's cost
        # the most seconds to time, from the batch rate at the end of the warm-up (the
        # explorer's budget shared among the settings it tries); the window's cap if less
        self._cap_s = cap_s
        self._window, self._clock, self._count = window, clock, count
        # the loader's CPU and queue delay: its workers' so far (None: unread), or this thread's
        self._workers_cpu, self._thread_cpu = workers_cpu, thread_cpu
        self._process_cpu, self._span_process_cpu, self._cpu_s = process_cpu, 0.0, 0.0
        self._loader = LoaderTime()
        self.tally, self.steps = Tally(), StepWatch()
        self.first_batch_s: float | None = None
        self._warm_started: float | None = None  # the warm-up's (``_restart_warmup``)
        self._length = 0  # batches per sub-window, known after the warm-up
        self._grouped = 1  # sub-windows per span (timed_spans.time_sets' rule)
        self._span_start: float | None = None
        # batches, samples, waited, and CPU inside __next__, in the sub-window in progress
        self._span = (0, 0, 0.0, ZERO)
        self._span_workers_cpu: CpuTimes | None = None
        self._asked, self._asked_cpu = 0.0, ZERO
        self._ended_at: float | None = None  # the last epoch's end, its next first batch due
        self._between_s = 0.0  # the loop's time between epochs (or paused), while read
        self.done = False
        # a whole epoch (as long as the longest) closed no span: its warm-up and one
        # sub-window are longer than an epoch, and every epoch warms up again, so it can
        # never be timed on this run; never so where an earlier meter timed the setting
        self.untimeable, self._timed_before = False, timed_before
        # whether the epoch under way began with this meter (a switch's first batch its first)
        self._epoch_whole, self._spans_then = False, 0
        # the longest wait at an epoch's boundary: the last one's end, the next one's first batch
        self.epoch_start_s, self._epoch_head, self._end_s = 0.0, False, 0.0
        # the run's first (``drain``): the prefetch buffer, filled while its first steps ran
        self._restart_warmup(settings.buffered_batches if drain else 0)

    def _restart_warmup(self, head: int) -> None:
        """A warm-up of ``head`` batches, then the window's extra ones."""
        self._warmup_left = warmup_batches(head, self._window.warmup_extra_batches)
        self._warm_started, self._warm_batches = None, 0
        self._span_start, self._span = None, (0, 0, 0.0, ZERO)
        self.steps.forget()

    def requested(self) -> None:
        """The loop asks for the next batch: the step of the last one is done."""
        now = self._asked = self._clock()
        self._asked_cpu = ZERO if self.settings.num_workers else self._thread_cpu()  # reads
        if self._ended_at is not None:  # an epoch's first batch: the time since, the loop's
            self._between_s, self._ended_at = self._between_s + now - self._ended_at, None
        elif paused := self.steps.paused(now):  # the loop's own (``pauses``): untimed
            self._between_s += paused
            # sub-windows fit between two pauses, after a warm-up of the buffer filled meanwhile
            buffered = self.settings.buffered_batches
            if (between := self.steps.batches - buffered) > 1:
                self.sized(between)
            self._restart_warmup(buffered)
        if self._span_start is not None and self._span[0] == self._length:
            self._close_span(now)
        if not self.done and self._length and self._span_start is None and not self._warmup_left:
            self._span_start = now
            self._began = self._began or (now, self._between_s)
            self._span_workers_cpu = self._workers_cpu() if self.settings.num_workers else None
            self._span_process_cpu = self._process_cpu()

    def received(self, batch: Any) -> None:
        """The loop has the batch it asked for."""
        now = self._clock()
        self.steps.received(now)
        waited = now - self._asked
        if self._after_switch and self.first_batch_s is None:
            self.first_batch_s, self._epoch_head = waited, False
            return
        if self._epoch_head:
            boundary = waited + self._end_s
            self.epoch_start_s, self._epoch_head = max(self.epoch_start_s, boundary), False
        if self._warmup_left:
            self._warmup_left -= 1
            if self._warmup_left < self._window.warmup_extra_batches:  # past the buffer
                if self._warm_started is None:
                    self._warm_started = self._asked
                self._warm_batches += 1
            if not self._warmup_left and not self._length:
                self._length = self._sub_window_length(now)
            return
        if self._span_start is not None:
            batches, samples, span_waited, cpu = self._span
            if not self.settings.num_workers:  # it reads its samples itself
                cpu += self._thread_cpu() - self._asked_cpu
            self._span = (batches + 1, samples + self._count(batch), span_waited + waited, cpu)

    def waiting_s(self) -> float:
        """How long the batch asked for last has been waited for."""
        return self._clock() - self._asked

    def epoch_ended(self, end_s: float = 0.0, *, shorter: bool = False) -> None:
        """The epoch is over (its end waited ``end_s``: workers that do not persist shut down
        in it; ``shorter``: than the run's longest, as a bucketing sampler's epochs vary):
        what the loop does now is not the loader's; warm up again."""
        closed = len(self.tally.spans) - self._spans_then
        timeable = self.done or self._timed_before or shorter  # or no evidence it is not
        if self._epoch_whole and not closed and not timeable:  # a whole epoch, no span
            self.untimeable = True
        self._spans_then = len(self.tally.spans)
        self._epoch_whole = True
        # the next epoch's first batch (its workers' first round), unless a switch's cost
        self._restart_warmup(0 if self._after_switch and self.first_batch_s is None else 1)
        self._epoch_head = True
        self._ended_at = self._clock()  # the loop validates, saves: its time, not the loader's
        self._end_s = end_s

    def epoch_left(self, timeable: int | None = None) -> bool:
        """The loop left its epoch early (a ``break``): what it did since is not the loader's;
        warm up again. Where it leaves each so, sub-windows fit the ``timeable`` batches of a
        pass; True, once, where a warm-up and one sub-window do not: the setting untimeable,
        unless it was timed before (then its reading is done as it stands)."""
        self.sized(timeable)
        fits = timeable is None or timeable >= fewest_batches(self.settings, self._window)
        self.done = self.done or (not fits and bool(self.tally.spans))
        newly = not (fits or self.untimeable or self.done or self._timed_before)
        self.untimeable = self.untimeable or newly
        self._restart_warmup(1)
        self._epoch_head, self._end_s = True, 0.0
        return newly

    def sized(self, epoch_batches: int | None) -> None:
        """An epoch's batches learned (a stream's, or a sampler's with no length, as its
        first epoch ends), or fewer than known (a pass the loop leaves): the sub-windows
        sized anew to fit, at the next warm-up's end."""
        known = self._epoch_batches
        if epoch_batches is not None and (not known or epoch_batches < known):
            self._epoch_batches, self._length = epoch_batches, 0

    def follows(self, earlier: Meter) -> Meter:
        """This meter, in place of ``earlier`` (a switch made as an epoch starts): the loop's
        time since that epoch ended is the loop's, not this setting's."""
        self._ended_at = earlier._ended_at
        return self

    def cut(self) -> bool:
        """At an epoch's end: whether the reading is done, taken as it stands where the
        setting ran its whole epoch (a switch waits for the next) and timed a span."""
        self.done = self.done or (self._whole_epoch and bool(self.tally.spans))
        return self.done

    def _sub_window_length(self, now: float) -> int:
        """Batches per sub-window, from the rate at the end of the warm-up; a cap shorter
        than the window's shortens the sub-windows with it."""
        seconds = now - self._warm_started if self._warm_started is not None else 0.0
        rate = self._warm_batches / seconds if seconds > 0 else None
        cap = self._cap_s(rate) if self._cap_s is not None and rate else 0.0
        self._window = window = capped(self._window, cap)
        return sub_window_batches(
            self.settings, window, rate, epoch_batches=self._epoch_batches,
            whole_epoch=self._whole_epoch,
        )  # fmt: skip

    def _close_span(self, now: float) -> None:
        batches, samples, waited, cpu = self._span
        seconds = now - self._span_start  # type: ignore[operator]
        self._loader_read(seconds, samples, waited, cpu)
        self.tally.add(samples, seconds, batches, waited)
        self._span_start, self._span = None, (0, 0, 0.0, ZERO)
        self.done = self._settled(now)

    def _loader_read(self, seconds: float, samples: int, waited: float, cpu: CpuTimes) -> None:
        """The span's loader wall and CPU (and run-queue delay): each worker's share of the
        span and their CPU, or without workers the waits in __next__ and this thread's CPU
        there; and the CPU this process and its workers used over it."""
        workers = self.settings.num_workers
        self._cpu_s += self._process_cpu() - self._span_process_cpu
        if workers:
            before, after = self._span_workers_cpu, self._workers_cpu()
            if before is None or after is None:
                return
            waited, cpu = workers * seconds, after - before
            self._cpu_s += cpu.ran_s
        self._loader.add(waited, cpu, samples)

    def _settled(self, now: float) -> bool:
        """timed_spans.time_sets' rule: after each set of sub-windows, done unless the set's
        spans disagree and another set still fits in the time: the wall time since the first
        span began (each epoch's warm-up in it, not the loop's time between epochs), as the
        spans of a setting timed one an epoch are a small part of it."""
        window, tally = self._window, self.tally
        if self._beaten():
            return True
        count = window.sub_windows
        if len(tally.spans) < count * self._grouped:
            return False
        if window.target_spread <= 0 or count == 1:
            return True
        wide = relative_spread(tally.spans_of(self._grouped, count)) > window.target_spread
        began, between_then = self._began or (now, self._between_s)
        spent = now - began - (self._between_s - between_then)
        fits = spent + count * spent / len(tally.spans) <= window.max_timed_s
        if wide and fits:
            self._grouped += 1
            return False
        return True

    def _beaten(self) -> bool:
        """Whether a proposal's rate so far, with evidence, is clearly below the best so far
        (``tuner.ways.beaten``): the rest of its timing could not make it the one kept."""
        spans = len(self.tally.spans)
        if self._rival is None or spans < EVIDENCE_FROM:
            return False
        if beaten(self.tally.rate, self._rival):
            self.beaten_after = spans
        return bool(self.beaten_after)

    def reading(self) -> Reading:
        """What was measured (settled or not)."""
        tally = self.tally
        spans = tally.spans_of(self._grouped, min(self._window.sub_windows, len(tally.spans)))
        return Reading(
            settings=self.settings,
            samples_per_s=tally.rate if tally.elapsed else 0.0,
            spread=relative_spread(spans) if spans else 0.0,
            data_wait=tally.waited / tally.elapsed if tally.elapsed else 0.0,
            first_batch_s=self.first_batch_s or 0.0,
            batches=tally.batches,
            seconds=tally.elapsed,
            **self._loader.per_sample(),
            cpu_s=self._cpu_s,
            between_epochs_s=self._between_s,
            beaten_after=self.beaten_after,
            epoch_start_s=self.epoch_start_s,
        )
