"""Tests for autotune.runtime.window: the timed window, driven by a fake clock and a fake loader.

Times are binary fractions (0.25, 0.5, ...) so every clock reading is exact and the rates the
window reports can be compared with ``==`` to the rates the fake pipeline is built to deliver.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator

import pytest
import torch

from autotune.runtime import window_length
from autotune.runtime.gpu_monitor import UtilizationSampler
from autotune.runtime.measurement import Measurement
from autotune.runtime.peers import ALONE, Alone, Peers
from autotune.runtime.window import (
    WindowStopped,
    run_ceiling,
    run_window,
)
from autotune.runtime.window_length import warmup_batches

BATCH_SIZE = 8
T_BATCH = 0.25  # seconds the fake loader takes per batch once its buffer is drained
T_STEP = 0.5  # seconds the fake step takes
SUSTAINED = BATCH_SIZE / (T_BATCH + T_STEP)


class FakeClock:
    """A clock that only moves when the fake loader or step moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeLoader:
    """An endless loader: batch ``i`` costs ``cost(i)`` seconds of the fake clock."""

    def __init__(self, clock: FakeClock, cost: Callable[[int], float]) -> None:
        self.clock, self.cost, self.drawn = clock, cost, 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            self.clock.now += self.cost(self.drawn)
            self.drawn += 1
            yield torch.zeros(BATCH_SIZE, 1), torch.zeros(BATCH_SIZE, dtype=torch.int64)


def prefetching(
    buffered: int, *, t_batch: float = T_BATCH, startup: float = 0.0
) -> Callable[[int], float]:
    """Cost of batch i: the first after ``startup``, the ``buffered`` first ones ready (0 s),
    then one every ``t_batch`` seconds."""
    return lambda i: (startup if i == 0 else 0.0) + (0.0 if i < buffered else t_batch)


def make_step(clock: FakeClock, t_step: float = T_STEP) -> Callable[..., None]:
    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        clock.now += t_step

    return step


def window(
    buffered: int = 8,
    *,
    startup: float = 0.0,
    cost: Callable[[int], float] | None = None,
    **kwargs: object,
) -> tuple[Measurement, FakeLoader]:
    clock = FakeClock()
    loader = FakeLoader(clock, cost or prefetching(buffered, startup=startup))
    options: dict = {"warmup": warmup_batches(buffered, 4), "sub_windows": 3}
    options.update(batches_per_window=4, clock=clock)
    options.update(kwargs)
    return run_window(loader, make_step(clock), **options), loader


def test_warmup_batches_drains_the_buffer_then_extra() -> None:
    assert warmup_batches(8, 4) == 12
    assert warmup_batches(0, 3) == 3


def test_warmed_up_window_measures_the_sustained_rate_exactly() -> None:
    m, _ = window(buffered=8)
    assert m.samples_per_s == SUSTAINED
    assert m.sub_window_samples_per_s == (SUSTAINED,) * 3
    assert m.data_wait_fraction == T_BATCH / (T_BATCH + T_STEP)
    assert m.warmup_batches == 12
    assert m.timed_batches == 3 * 4
    assert m.spread == 0.0


def test_no_warmup_reports_the_buffer_drain_as_speed() -> None:
    """The trap the warm-up exists for: ready batches make an unsustainable rate."""
    m, _ = window(buffered=8, warmup=0)
    assert m.samples_per_s > SUSTAINED
    assert m.sub_window_samples_per_s[0] == BATCH_SIZE / T_STEP  # all 4 batches were ready
    assert m.sub_window_samples_per_s[-1] == SUSTAINED  # buffer gone by the third window
    assert m.data_wait_fraction < T_BATCH / (T_BATCH + T_STEP)


def test_time_to_first_batch_is_kept_apart_from_the_rate() -> None:
    slow_start, _ = window(buffered=8, startup=3.0)
    fast_start, _ = window(buffered=8, startup=0.0)
    # the batch in hand: the first step's one-off warm-up is not start-up
    assert slow_start.time_to_first_batch_s == 3.0
    assert fast_start.time_to_first_batch_s == 0.0
    assert slow_start.first_step_s == fast_start.first_step_s == T_STEP  # timed on its own
    assert slow_start.samples_per_s == fast_start.samples_per_s == SUSTAINED
    assert slow_start.data_wait_fraction == fast_start.data_wait_fraction


@pytest.mark.parametrize("sub_windows", [1, 2, 5])
def test_one_rate_per_sub_window(sub_windows: int) -> None:
    m, loader = window(buffered=2, sub_windows=sub_windows, batches_per_window=3)
    assert len(m.sub_window_samples_per_s) == sub_windows
    assert m.timed_batches == 3 * sub_windows
    assert loader.drawn == 1 + m.warmup_batches + m.timed_batches  # first + warm-up + timed


def test_the_rate_is_all_timed_samples_over_all_timed_seconds() -> None:
    """A stall, then the burst of the buffer it let fill: the median of the sub-windows
    would keep the burst (8.0) and drop the stall; an epoch pays both."""
    # batch 0 first, then windows of 2 batches: window k's batches cost 0.5, 1.5, 0 s
    costs = {1: 0.5, 2: 0.5, 3: 1.5, 4: 1.5, 5: 0.0, 6: 0.0}
    seen: list[tuple[int, float]] = []
    m, _ = window(
        cost=lambda i: costs.get(i, 0.0),
        warmup=0,
        batches_per_window=2,
        on_sub_window=lambda index, rate: seen.append((index, rate)),
    )
    # per window: 16 samples over 2, 4 and 1 s (each step 0.5 s)
    assert m.sub_window_samples_per_s == (8.0, 4.0, 16.0)
    # the rate so far, as each sub-window from the second ends (one span is no rate)
    assert seen == [(1, 32 / 6), (2, 48 / 7)]
    assert m.samples_per_s == 48 / 7 < statistics.median(m.sub_window_samples_per_s)
    assert m.spread == (16.0 - 4.0) / 8.0  # the spread is still the sub-windows' own


def test_window_stopped_in_the_callback_stops_the_window() -> None:
    calls: list[int] = []

    def prune(index: int, median: float) -> None:
        calls.append(index)
        if index == 1:
            raise WindowStopped

    clock = FakeClock()
    loader = FakeLoader(clock, prefetching(2))
    with pytest.raises(WindowStopped):
        run_window(
            loader,
            make_step(clock),
            warmup=6,
            sub_windows=5,
            batches_per_window=4,
            clock=clock,
            on_sub_window=prune,
        )
    assert calls == [1]  # the first sub-window's rate is no evidence: not reported
    assert loader.drawn == 1 + 6 + 2 * 4  # nothing drawn after the stop


def test_min_sub_window_s_lengthens_sub_windows() -> None:
    short, _ = window(buffered=2, batches_per_window=2)
    assert short.timed_batches == 3 * 2
    # the warm-up tail runs at 0.75 s a batch: 5 s need ceil(5 / 0.75) = 7 batches
    long, _ = window(buffered=2, batches_per_window=2, min_sub_window_s=5.0)
    assert long.timed_batches == 3 * 7
    for rate in long.sub_window_samples_per_s:
        assert 7 * BATCH_SIZE / rate >= 5.0
    assert long.samples_per_s == SUSTAINED
    # never shortens: a window already long enough keeps its size
    same, _ = window(buffered=2, batches_per_window=10, min_sub_window_s=5.0)
    assert same.timed_batches == 3 * 10


def test_align_rounds_batches_per_window_up() -> None:
    m, _ = window(buffered=2, batches_per_window=5, align=4)
    assert m.timed_batches == 3 * 8
    m, _ = window(buffered=2, batches_per_window=8, align=4)
    assert m.timed_batches == 3 * 8
    # after min_sub_window_s: 7 batches rounded up to 8
    m, _ = window(buffered=2, batches_per_window=2, min_sub_window_s=5.0, align=4)
    assert m.timed_batches == 3 * 8
    assert m.samples_per_s == SUSTAINED


def test_zero_duration_warmup_tail_with_min_sub_window_s() -> None:
    clock = FakeClock()  # nothing advances it: loader and step both free
    m = run_window(
        FakeLoader(clock, lambda i: 0.0),
        lambda batch: None,
        warmup=4,
        sub_windows=2,
        batches_per_window=3,
        min_sub_window_s=1.0,
        clock=clock,
    )
    assert m.timed_batches == 2 * 3  # cannot extrapolate from no time: keep the minimum


def test_run_ceiling_measures_the_step_alone() -> None:
    clock = FakeClock()
    batch = (torch.zeros(BATCH_SIZE, 1), torch.zeros(BATCH_SIZE, dtype=torch.int64))
    m = run_ceiling(
        batch, make_step(clock), warmup=2, sub_windows=3, batches_per_window=4, clock=clock
    )
    assert m.samples_per_s == BATCH_SIZE / T_STEP
    assert m.data_wait_fraction == 0.0
    assert m.time_to_first_batch_s == 0.0  # the batch is there: nothing to start
    assert m.timed_batches == 12
    assert m.samples_per_s > SUSTAINED  # the pipeline can never beat its ceiling


def test_measurement_spread() -> None:
    m = Measurement(
        samples_per_s=100.0,
        sub_window_samples_per_s=(90.0, 100.0, 110.0),
        data_wait_fraction=0.25,
        time_to_first_batch_s=1.5,
        warmup_batches=12,
        timed_batches=48,
    )
    assert m.spread == pytest.approx(0.2)
    zero = Measurement(0.0, (0.0, 0.0), 0.0, 0.0, 0, 2)
    assert zero.spread == 0.0


def test_gpu_utilization_is_sampled_in_the_timed_sub_windows_only() -> None:
    clock = FakeClock()
    loader = FakeLoader(clock, prefetching(2))
    drawn_at_reads: list[int] = []

    def read() -> float:
        drawn_at_reads.append(loader.drawn)
        return 40.0

    gpu = UtilizationSampler(read, interval_s=60.0)
    m = run_window(
        loader,
        make_step(clock),
        warmup=6,
        sub_windows=3,
        batches_per_window=4,
        clock=clock,
        gpu=gpu,
    )
    assert m.gpu_utilization_pct == 40.0
    first_timed = 1 + 6  # the first batch and the warm-up come before any timed span
    assert drawn_at_reads == [first_timed, first_timed + 4, first_timed + 8]


def test_gpu_utilization_is_absent_without_a_sampler() -> None:
    m, _ = window(buffered=2)
    assert m.gpu_utilization_pct is None


def test_process_cpu_time_per_timed_sample() -> None:
    """CPU time is read at the edges of the timed sub-windows only, and divided by the timed
    samples: here the fake CPU clock runs at half the speed of the fake wall clock."""
    clock = FakeClock()
    m = run_window(
        FakeLoader(clock, prefetching(2)),
        make_step(clock),
        warmup=6,
        sub_windows=3,
        batches_per_window=4,
        clock=clock,
        cpu_clock=lambda: clock.now / 2,
    )
    # a sample costs (T_BATCH + T_STEP) / BATCH_SIZE seconds of wall time at the steady rate
    assert m.process_cpu_s_per_sample == (T_BATCH + T_STEP) / BATCH_SIZE / 2


class EpochLoader:
    """Epochs that end when told: each ``iter()`` starts one after ``restart`` seconds, then
    hands out ``in_flight`` more batches once told to end, then stops; after ``one_pass()``
    the next epoch is ``pass_len`` batches, the last ``idle`` seconds late (workers that
    raced ahead into their buffer, idle while it drains, make an epoch's batches so)."""

    def __init__(
        self,
        clock: FakeClock,
        restart: float,
        in_flight: int,
        pass_len: int = 4,
        idle=0.0,
        cost: Callable[[int], float] = lambda i: T_BATCH,
    ) -> None:
        self.clock, self.restart, self.in_flight = clock, restart, in_flight
        self.ended, self.epochs, self.after_end = False, 0, 0
        self.pass_len, self.idle, self.one, self.last_pass = pass_len, idle, False, 0
        self.cost, self.drawn = cost, 0  # the i-th batch drawn costs cost(i)

    def end(self) -> None:
        self.ended = True

    def one_pass(self) -> None:
        self.one = True

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.epochs += 1
        self.ended = False
        self.clock.now += self.restart
        if self.one:
            for i in range(self.pass_len):
                self.clock.now += self.cost(self.drawn)
                self.clock.now += self.idle if i == self.pass_len - 1 else 0.0
                self.drawn += 1
                self.last_pass += 1
                yield torch.zeros(BATCH_SIZE, 1), torch.zeros(BATCH_SIZE, dtype=torch.int64)
            return
        while not self.ended or self.after_end < self.in_flight:
            if self.ended:
                self.after_end += 1
            self.clock.now += self.cost(self.drawn)
            self.drawn += 1
            yield torch.zeros(BATCH_SIZE, 1), torch.zeros(BATCH_SIZE, dtype=torch.int64)


def test_an_epoch_boundary_made_after_the_window_times_the_next_epoch_s_start() -> None:
    clock = FakeClock()
    epochs = EpochLoader(clock, restart=1.5, in_flight=3)
    m = run_window(
        epochs,
        make_step(clock),
        warmup=2,
        sub_windows=3,
        batches_per_window=4,
        clock=clock,
        end_epoch=epochs.end,
    )
    assert epochs.epochs == 2 and epochs.after_end == 3  # the in-flight batches drained
    assert m.epoch_start_s == 1.5 + T_BATCH  # the restart and the next epoch's first batch
    assert m.samples_per_s == SUSTAINED  # the boundary is not in the timed windows
    without, _ = window()
    assert without.epoch_start_s is None  # no boundary asked for: none made
    assert m.epoch_overhead_s is None and without.epoch_overhead_s is None


def timed_epochs(
    max_timed_s: float,
    restart: float = 1.5,
    idle: float = 0.25,
    target_spread: float = 0.1,
    peers: Peers = ALONE,
    pass_len: int = 4,
    epoch_sub_windows: int | None = None,
    on_sub_window: Callable[[int, float], None] | None = None,
    **loader: object,
) -> tuple[Measurement, EpochLoader]:
    """A run that makes epochs: passes of ``pass_len`` batches, each epoch's start
    ``restart`` s; 3 sub-windows (``epoch_sub_windows`` where they are real epochs)."""
    clock = FakeClock()
    epochs = EpochLoader(
        clock, restart=restart, in_flight=3, pass_len=pass_len, idle=idle, **loader
    )
    m = run_window(
        epochs, make_step(clock), warmup=2, sub_windows=3, batches_per_window=4, clock=clock,
        end_epoch=epochs.end, one_pass=epochs.one_pass, pass_batches=pass_len,
        max_timed_s=max_timed_s, target_spread=target_spread, peers=peers,
        epoch_sub_windows=epoch_sub_windows, on_sub_window=on_sub_window,
    )  # fmt: skip
    return m, epochs


def test_a_run_that_makes_epochs_times_its_sub_windows_as_real_epochs() -> None:
    m, epochs = timed_epochs(max_timed_s=math.inf)
    # the warm-up's epoch, ended; then three epochs of one pass each
    assert epochs.epochs == 1 + 3 and epochs.last_pass == 3 * 4 and epochs.after_end == 3
    # the steady rate: each epoch's flow after its workers' first round (one batch here),
    # its last batch late by the workers' idle time
    assert m.whole_passes and m.timed_batches == 3 * 3 and len(m.sub_window_samples_per_s) == 3
    flow_s = 3 * (T_BATCH + T_STEP) + 0.25
    assert m.samples_per_s == pytest.approx(3 * BATCH_SIZE / flow_s)
    assert m.epoch_start_s == 1.5 + T_BATCH  # each epoch's restart and first batch
    # each epoch from iter() to its end, beyond its samples at the steady rate: the figure
    epoch_s = 1.5 + 4 * (T_BATCH + T_STEP) + 0.25
    assert m.epoch_overhead_s == pytest.approx(epoch_s - 4 * BATCH_SIZE / m.samples_per_s)


def test_real_epochs_are_timed_as_many_as_epoch_sub_windows_says() -> None:
    """Each real epoch reads every sample: two of them, where sub-windows inside one epoch
    (shorter spans, a share of the samples each) stay three."""
    m, epochs = timed_epochs(max_timed_s=1e6, epoch_sub_windows=2)
    assert epochs.epochs == 1 + 2 and len(m.sub_window_samples_per_s) == 2
    assert len(m.settled_sub_windows) == 2 and m.timed_batches == 2 * 3
    # a run that could make epochs, whose passes are too long for the time cap: three inside
    inside, _ = timed_epochs(max_timed_s=30.0, pass_len=1000, epoch_sub_windows=2)
    assert len(inside.sub_window_samples_per_s) == 3 and not inside.whole_passes
    # whether they fit the time cap is asked of two epochs, not of three
    lengths = {"at_least": 4, "batch_rate": 1.0, "min_sub_window_s": 0.0, "align": 1}
    lengths |= {"consumed": 3, "pass_batches": 4, "count": 3, "max_timed_s": 9.0}
    assert window_length.sub_windows(**lengths, makes_epochs=True, epoch_count=2).epochs == 1
    assert window_length.sub_windows(**lengths, makes_epochs=True).epochs == 0


def test_each_real_epoch_but_the_last_is_reported_and_may_stop_the_rest() -> None:
    """A whole epoch's rate is evidence; after the last nothing is left to save, and a
    stop there would throw a finished measurement away."""
    seen: list[tuple[int, float]] = []
    m, _ = timed_epochs(max_timed_s=math.inf, on_sub_window=lambda i, r: seen.append((i, r)))
    assert [i for i, _ in seen] == [0, 1] and len(m.sub_window_samples_per_s) == 3
    assert seen[0][1] == pytest.approx(m.sub_window_samples_per_s[0])  # the first epoch's

    def prune(index: int, rate: float) -> None:
        seen.append((index, rate))
        raise WindowStopped(index)

    seen.clear()
    with pytest.raises(WindowStopped):
        timed_epochs(max_timed_s=math.inf, on_sub_window=prune)
    assert [i for i, _ in seen] == [0]
    # passes of 2 batches, sub-windows of at least 4: two epochs to a sub-window, the first
    # report after the second epoch (one short epoch is no more a rate than a short span)
    seen.clear()
    m, epochs = timed_epochs(
        max_timed_s=math.inf, pass_len=2, on_sub_window=lambda i, r: seen.append((i, r))
    )
    assert epochs.epochs == 1 + 3 * 2 and [i for i, _ in seen] == [1, 2, 3, 4]


def test_an_epoch_too_short_for_a_flow_is_timed_whole() -> None:
    """Two workers, epochs of 3 batches: each worker's first comes together, and what
    follows is no flow to tell apart from the start: the whole epoch is the span."""
    clock = FakeClock()
    epochs = EpochLoader(clock, restart=1.5, in_flight=0, pass_len=3)
    m = run_window(
        epochs, make_step(clock), warmup=2, sub_windows=3, batches_per_window=3, clock=clock,
        align=2, end_epoch=epochs.end, one_pass=epochs.one_pass, pass_batches=3,
        max_timed_s=1e6,
    )  # fmt: skip
    assert m.timed_batches == 3 * 3
    epoch_s = 1.5 + 3 * (T_BATCH + T_STEP)
    assert m.samples_per_s == pytest.approx(3 * BATCH_SIZE / epoch_s)
    assert m.epoch_overhead_s == pytest.approx(0.0)


def buffered_epochs(pass_batches: int, max_timed_s: float) -> tuple[Measurement, EpochLoader]:
    """A run that makes epochs, whose workers keep 8 batches ready at its start."""
    clock = FakeClock()
    epochs = EpochLoader(clock, restart=0.0, in_flight=0, cost=prefetching(8))
    m = run_window(
        epochs, make_step(clock), warmup=warmup_batches(8, 4), buffered=8, sub_windows=3,
        batches_per_window=4, clock=clock, end_epoch=epochs.end, one_pass=epochs.one_pass,
        pass_batches=pass_batches, max_timed_s=max_timed_s,
    )  # fmt: skip
    return m, epochs


def test_real_epochs_need_no_prefetch_buffer_drained_before_them() -> None:
    """Each epoch starts with an empty buffer, as the user's do: the warm-up's batches that
    drain a full buffer (``buffered``) are left out; its first batch and the extra ones stay."""
    m, epochs = buffered_epochs(pass_batches=4, max_timed_s=1e6)
    assert m.warmup_batches == 4 and epochs.drawn == 1 + 4 + 3 * 4
    assert m.timed_batches == 3 * (4 - 1)  # each epoch's flow, after its first round


def test_sub_windows_in_one_epoch_drain_the_buffer_first_where_epochs_were_possible() -> None:
    """Passes too long to be the sub-windows: the warm-up's drain of the buffer, left out in
    case they could be epochs, runs before them, so the buffer cannot flatter the rate."""
    m, _ = buffered_epochs(pass_batches=1000, max_timed_s=30.0)
    assert not m.whole_passes and m.warmup_batches == 12
    assert m.samples_per_s == SUSTAINED  # the 8 ready batches went by untimed


def test_no_real_epoch_starts_that_would_end_past_the_time_cap() -> None:
    """A warm-up read off a full buffer says three passes fit the cap; the first epoch,
    timed, says they do not: the epochs stop there."""
    m, epochs = timed_epochs(max_timed_s=8.0, cost=prefetching(8))
    # the warm-up's 2 batches were ready: 2 batches/s, 3 passes of 4 in 6 s; an epoch
    # takes over 4 s, its restart in it
    assert epochs.epochs == 1 + 1 and len(m.sub_window_samples_per_s) == 1
    assert m.timed_batches == 3 and m.epoch_overhead_s is not None


def test_real_epochs_are_one_set_however_they_disagree() -> None:
    """Every fifth batch slow: the epochs' flows disagree by more than the target. Real
    epochs are the figure, which longer spans could not change: one set, as it spread."""
    every_fifth_slow = lambda i: 1.0 if i % 5 == 0 else 0.25  # noqa: E731
    m, _ = timed_epochs(max_timed_s=1e6, restart=0.0, idle=0.0, cost=every_fifth_slow)
    assert m.grouped == 1 and m.timed_batches == 3 * 3 and m.spread > 0.1


def test_a_whole_epoch_that_fits_is_timed_after_sub_windows_that_do_not() -> None:
    """Three passes past the time cap, one within it: the sub-windows run on in one epoch,
    and one whole epoch after them is timed and charged beyond its samples at their rate."""
    cap = 2 * 4 * (T_BATCH + T_STEP)  # two passes' time at the sustained rate
    m, epochs = timed_epochs(max_timed_s=cap)
    assert epochs.epochs == 2 and epochs.last_pass == 4  # the next epoch: one pass, whole
    assert not m.whole_passes and m.samples_per_s == SUSTAINED  # the epoch is not in them
    assert m.epoch_start_s == 1.5 + T_BATCH  # its start, as without it
    # 4 batches beyond their time at the steady rate: the restart and the late last batch
    assert m.epoch_overhead_s == pytest.approx(1.5 + 0.25)
    # a pass longer than the window's time cap at the rate timed: its start alone
    short, epochs = timed_epochs(max_timed_s=4 * (T_BATCH + T_STEP) * 0.9)
    assert short.epoch_overhead_s is None and epochs.last_pass == 0
    assert short.epoch_start_s == 1.5 + T_BATCH
    # a pass that ran faster than the steady rate: charged below 0, not 0 (a clamp would
    # charge the noise of every pass that runs slower and none of one that runs faster)
    fast, _ = timed_epochs(max_timed_s=cap, restart=0.0, idle=-0.1)
    assert fast.epoch_overhead_s == pytest.approx(-0.1)


def uneven(buffered: int, every: int) -> Callable[[int], float]:
    """Every ``every``-th batch is a big file: 16 times the cost of the others. Short
    sub-windows disagree (some catch one, some none); long ones average it out."""
    return lambda i: 0.0 if i < buffered else (4.0 if i % every == 0 else 0.25)


def test_uneven_batches_lengthen_the_spans_until_they_agree() -> None:
    short, _ = window(buffered=0, cost=uneven(0, 7), batches_per_window=2)
    assert short.spread > 0.5  # what the short window saw
    long, _ = window(
        buffered=0, cost=uneven(0, 7), batches_per_window=2, target_spread=0.1, max_timed_s=1e6
    )
    assert long.spread <= 0.1
    # sub-windows of 2 batches throughout, whole sets of 3; the last set's spans are
    # ``grouped`` of them each, one more than the set before
    rates = long.sub_window_samples_per_s
    assert long.timed_batches == 2 * len(rates) and len(rates) % 3 == 0
    assert long.grouped == len(rates) // 3 > 1
    last = rates[-3 * long.grouped :]
    spans = [last[i : i + long.grouped] for i in range(0, len(last), long.grouped)]
    # each span: its samples over its seconds (the sub-windows hold equal samples)
    expected = [len(s) / sum(1 / r for r in s) for s in spans]
    assert long.settled_sub_windows == pytest.approx(expected)


def test_the_time_cap_stops_the_lengthening_and_the_spread_reached_is_kept() -> None:
    """Batches that grow ever slower never agree: the cap ends the window."""
    capped, _ = window(
        buffered=0,
        cost=lambda i: 0.25 + 0.25 * (i // 4),
        batches_per_window=2,
        target_spread=0.01,
        max_timed_s=300,
    )
    timed_s = capped.timed_batches * BATCH_SIZE / capped.samples_per_s
    assert timed_s <= 300
    assert capped.grouped > 1  # it did lengthen before the cap
    assert capped.spread > 0.01  # the target was not reached: what was reached is stored
    spans = capped.settled_sub_windows
    assert len(spans) == 3
    assert capped.spread == pytest.approx((max(spans) - min(spans)) / statistics.median(spans))


def test_even_batches_are_not_lengthened() -> None:
    m, _ = window(buffered=2, target_spread=0.1, max_timed_s=1e6)
    assert m.timed_batches == 3 * 4 and m.spread == 0.0


def test_the_pruner_sees_every_sub_window_of_the_lengthened_sets() -> None:
    seen: list[int] = []
    m, _ = window(
        buffered=0,
        cost=uneven(0, 7),
        batches_per_window=2,
        target_spread=0.1,
        max_timed_s=1e6,
        on_sub_window=lambda index, rate: seen.append(index),
    )
    assert seen == list(range(1, len(m.sub_window_samples_per_s)))  # each from the second


def test_a_small_dataset_is_timed_in_whole_passes_from_where_one_starts() -> None:
    """Batch i of a pass of 6 costs 2 s if it is the pass's first (its big file), else
    0.25 s: sub-windows of 4 batches disagree by whether they hold it; whole passes agree."""
    per_pass = lambda i: 2.0 if i % 6 == 0 else 0.25  # noqa: E731
    short, _ = window(buffered=0, cost=per_pass, batches_per_window=4)
    assert short.spread > 0.5 and not short.whole_passes
    passes, loader = window(buffered=0, cost=per_pass, batches_per_window=4, pass_batches=6)
    assert passes.whole_passes and passes.spread == 0.0
    assert passes.timed_batches == 3 * 6  # 4 batches rounded up to a pass
    # the first batch and 4 warm-up ones are gone: one more, untimed, to where a pass starts
    assert loader.drawn == 1 + 4 + 1 + 3 * 6


def test_passes_too_long_for_the_time_cap_are_not_waited_for() -> None:
    m, _ = window(buffered=2, batches_per_window=4, pass_batches=1000, max_timed_s=30.0)
    assert not m.whole_passes and m.timed_batches == 3 * 4


class OtherRankLengthens:
    """Peers of which another rank still spreads too wide twice, and is the slowest to warm
    up: what this rank must follow, or the ranks' steps (each an all-reduce) part ways."""

    def __init__(self) -> None:
        self.asked, self.waits, self.lengthen = [], 0, 2

    def wait(self) -> None:
        self.waits += 1

    def least(self, value: float) -> float:
        return min(value, 0.5)  # batches/s: the other rank's warm-up

    def total(self, value: float) -> float:
        return 2 * value

    def any(self, flag: bool) -> bool:
        self.asked.append(flag)
        wanted, self.lengthen = self.lengthen > 0, self.lengthen - 1
        return flag or wanted


def test_the_ranks_agree_on_each_decision_and_meet_at_each_span() -> None:
    peers = OtherRankLengthens()
    alone, _ = window(buffered=2, target_spread=0.1, max_timed_s=1e6)
    together, _ = window(buffered=2, target_spread=0.1, max_timed_s=1e6, peers=peers)
    assert alone.grouped == 1  # even batches: this rank alone would stop at once
    assert peers.asked == [False, False, False]  # its own answer each time: "no need"
    assert together.grouped == 3 and together.timed_batches == 3 * 3 * 4  # the other's way
    # a barrier at each span's start and end, besides start-up and warm-up
    assert peers.waits >= 2 * len(together.sub_window_samples_per_s)


class OtherRankPassTooLong(Alone):
    """Peers of which another rank's pass would not fit the time cap: any flag is set."""

    def __init__(self) -> None:
        self.asked: list[bool] = []

    def any(self, flag: bool) -> bool:
        self.asked.append(flag)
        return True


def test_no_rank_times_a_whole_epoch_unless_every_rank_s_pass_fits() -> None:
    """One rank stepping through a whole epoch that another skips would wait forever on its
    first all-reduce: the ranks agree first, and the slowest rank's answer holds."""
    cap = 2 * 4 * (T_BATCH + T_STEP)  # this rank's pass fits, as in the test before
    peers = OtherRankPassTooLong()
    m, epochs = timed_epochs(max_timed_s=cap, target_spread=0.0, peers=peers)
    assert peers.asked == [False]  # this rank's own answer: its pass is not too long
    assert epochs.last_pass == 0 and m.epoch_overhead_s is None  # the other's answer holds
    assert m.epoch_start_s == 1.5 + T_BATCH


def test_the_ranks_shape_their_sub_windows_for_the_slowest_warm_up() -> None:
    alone, _ = window(buffered=2, min_sub_window_s=6)
    together, _ = window(buffered=2, min_sub_window_s=6, peers=OtherRankLengthens())
    # 6 s at this rank's 4/3 batches/s: 8 batches; at the other's 0.5: 3, so the 4 asked
    assert alone.timed_batches == 3 * 8 and together.timed_batches == 3 * 4


def test_graphs_compiled_inside_the_timed_windows_are_counted_not_those_before() -> None:
    """A batch of a new shape compiles again: counted where it lands in the timed part."""
    compiled = []

    def compiles_at(*batches: int) -> Callable[[], int]:
        return lambda: sum(1 for b in batches if b < len(compiled))

    clock = FakeClock()
    loader = FakeLoader(clock, prefetching(8))
    step = make_step(clock)

    def counting_step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        compiled.append(True)  # one more batch stepped
        step(batch)

    warmup = warmup_batches(8, 4)
    options = {"warmup": warmup, "sub_windows": 3, "batches_per_window": 4, "clock": clock}
    # one graph in the first step (the start-up), one in the warm-up, one while timed
    m = run_window(loader, counting_step, compiles=compiles_at(0, 2, warmup + 3), **options)
    assert m.timed_compiles == 1
    compiled.clear()
    assert run_window(loader, counting_step, **options).timed_compiles == 0  # not compiled
