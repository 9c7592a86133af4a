"""Tests for autotune.online.meter: a setting's rate over the loop's own batches, timed by a
trial's rules from inside the loop: the switch's first batch apart, the prefetch buffer
drained untimed where the run starts, the step inside each sub-window, an epoch's end never
timed."""

from __future__ import annotations

import dataclasses
import functools
import time

import pytest
import torch

import autotune
from autotune.online.meter import Meter
from autotune.online.reading import Reading
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.runtime.sched import CpuTimes
from autotune.schema import WindowConfig

WINDOW = WindowConfig(
    warmup_extra_batches=2, sub_windows=3, batches_per_window=2, min_sub_window_s=0.0
)
BATCH = torch.zeros(4)  # 4 samples

# switched by the test alone: autotune.DataLoader with its explorer off
Manual = functools.partial(autotune.DataLoader, tune=False)


class Loop:
    """A loop on a scripted clock: each batch waited for ``wait`` s, stepped for ``step``."""

    def __init__(self, meter: Meter) -> None:
        self.now, self.meter = 0.0, meter
        meter._clock = lambda: self.now

    def batch(self, wait: float, step: float) -> None:
        self.meter.requested()
        self.now += wait
        self.meter.received(BATCH)
        self.now += step

    def until_read(self, wait: float, step: float) -> Reading:
        """Steady batches until the meter is done, then the request that closes its last
        span: the reading."""
        while not self.meter.done:
            self.batch(wait=wait, step=step)
        self.meter.requested()
        return self.meter.reading()


@pytest.mark.parametrize("drain", [True, False])
def test_times_sub_windows_after_the_switch_and_the_warm_up(drain) -> None:
    """The run's first setting (``drain``) warms up on its prefetch buffer, ready while its
    first steps ran, then the extra batches; a switch later in the run starts its workers
    with the buffer empty: the extra batches alone."""
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=1)
    loop = Loop(Meter(settings, WINDOW, drain=drain))
    loop.batch(wait=5.0, step=0.1)  # the first batch after a switch: its cost
    for _ in range(2 * drain):  # the buffer (2 workers x 1), filled while the loop was slow
        loop.batch(wait=0.0, step=0.1)
    for _ in range(2):  # the extra warm-up batches
        loop.batch(wait=0.05, step=0.1)
    reading = loop.until_read(wait=0.1, step=0.1)
    assert reading.first_batch_s == pytest.approx(5.0)
    assert reading.epoch_start_s == 0.0  # no epoch began while it was read
    assert reading.batches == 3 * 2  # three sub-windows of two batches (whole worker rounds)
    assert reading.samples_per_s == pytest.approx(4 / 0.2)  # the step is inside the span
    assert reading.data_wait == pytest.approx(0.5)
    assert reading.spread == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("rival", "stops_after"),
    [(None, 3), (10.0, 3), (22.1, 2), (30.0, 2)],  # 20 samples/s read: beaten below 22
)
def test_a_proposal_clearly_below_the_best_so_far_stops_once_it_has_evidence(
    rival, stops_after
) -> None:
    """A proposal raced against the best rate so far (``rival``) stops after two
    sub-windows where its rate, even 10 % higher, stays below it, as the study prunes a
    trial; one within reach, or one raced against nothing, is timed in full."""
    settings = PipelineConfig(decoder=AS_IS, num_workers=1, prefetch_factor=1)
    loop = Loop(Meter(settings, WINDOW, rival=rival))
    loop.batch(wait=1.0, step=0.1)  # the switch's first batch
    for _ in range(2):  # the extra warm-up batches
        loop.batch(wait=0.05, step=0.1)
    reading = loop.until_read(wait=0.1, step=0.1)
    assert reading.batches == stops_after * 2
    assert reading.samples_per_s == pytest.approx(4 / 0.2)
    assert reading.beaten_after == (stops_after if stops_after < 3 else 0)


def test_an_epoch_s_start_warms_up_on_its_first_batch_and_the_extra_ones() -> None:
    """At an epoch's start the buffer is empty: its first batch waits on the workers' first
    round, untimed, then the extra batches; the buffer is not drained again."""
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=4)
    loop = Loop(Meter(settings, WINDOW, after_switch=False))
    loop.meter.epoch_ended()
    loop.batch(wait=1.0, step=0.1)  # the epoch's first batch
    for _ in range(2):  # the extra warm-up batches
        loop.batch(wait=0.05, step=0.1)
    batches = 3
    while not loop.meter.done:
        loop.batch(wait=0.1, step=0.1)
        batches += 1
    loop.meter.requested()
    reading = loop.meter.reading()
    # the warm-up, three spans, and the batch whose request closed the last: not the 8
    # prefetched (2 workers x 4) drained again
    assert batches == 3 + 3 * 2 + 1
    assert reading.batches == 3 * 2 and reading.samples_per_s == pytest.approx(4 / 0.2)
    assert reading.first_batch_s == 0.0  # not a switch
    assert reading.epoch_start_s == pytest.approx(1.0)  # what each epoch's start pays


def test_an_epoch_s_start_is_told_from_the_switch_s_that_came_with_it() -> None:
    """A switch that came as an epoch ended: the next first batch is the switch's cost
    (its workers' start); an epoch begun after, while the setting is read, is the epoch's."""
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=1)
    loop = Loop(Meter(settings, WINDOW))
    loop.meter.epoch_ended()
    loop.batch(wait=3.0, step=0.1)  # the new workers' first batch
    for _ in range(2 + 2):  # the extra warm-up batches, one sub-window
        loop.batch(wait=0.1, step=0.1)
    loop.meter.requested()
    loop.meter.epoch_ended()
    loop.batch(wait=0.7, step=0.1)  # the next epoch's first: its workers refill the buffer
    reading = loop.until_read(wait=0.1, step=0.1)
    assert (reading.first_batch_s, reading.epoch_start_s) == pytest.approx((3.0, 0.7))


def test_an_epoch_s_end_its_workers_shut_down_in_is_part_of_its_boundary() -> None:
    """Workers that do not persist shut down as the last ``next()`` raises StopIteration:
    that wait, then the next epoch's first batch (its workers started), is what each epoch
    pays at its boundary."""
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=2)
    loop = Loop(Meter(settings, WINDOW, after_switch=False))
    loop.meter.requested()
    loop.now += 0.3  # the last next(): the workers shut down, then StopIteration
    loop.meter.epoch_ended(end_s=loop.meter.waiting_s())
    loop.now += 60.0  # the loop validates: its own time
    loop.batch(wait=0.5, step=0.1)  # the next epoch's first: its workers started
    reading = loop.until_read(wait=0.1, step=0.1)
    assert reading.epoch_start_s == pytest.approx(0.8)
    assert reading.between_epochs_s == pytest.approx(60.0)


def test_an_epoch_end_is_never_timed() -> None:
    loop = Loop(Meter(PipelineConfig(decoder=AS_IS), WINDOW, after_switch=False))
    for _ in range(2 + 2 + 1):  # warm-up (no workers: the extra batches), one batch of a span
        loop.batch(wait=0.0, step=0.1)
    loop.meter.requested()
    loop.meter.epoch_ended()  # then the loop validates for a minute
    loop.now += 60.0
    assert loop.until_read(wait=0.0, step=0.1).samples_per_s == pytest.approx(4 / 0.1)


def test_an_epoch_the_loop_left_early_is_not_timed_past_where_it_left() -> None:
    loop = Loop(Meter(PipelineConfig(decoder=AS_IS), WINDOW, after_switch=False))
    for _ in range(2 + 2 + 1):  # warm-up, one batch of a span
        loop.batch(wait=0.0, step=0.1)
    loop.meter.epoch_left()  # a break: then the loop validates for a minute
    loop.now += 60.0
    assert loop.until_read(wait=0.0, step=0.1).samples_per_s == pytest.approx(4 / 0.1)
    assert not loop.meter.untimeable  # no epoch ended without a span


def test_a_loop_that_breaks_out_of_its_epochs_is_timed_on_its_batches_alone() -> None:
    once = dataclasses.replace(WINDOW, target_spread=0.0)  # a reading of each set of spans
    loader = Manual(torch.zeros(64, 1), batch_size=4, window=once)
    for _ in range(3):
        for index, _ in enumerate(loader):
            if index == 10:  # a span of two batches open
                break
        time.sleep(0.2)  # the loop's validation, after it left the epoch: never timed
    assert loader.readings and all(r.seconds < 0.2 for r in loader.readings)


class _SlowToDraw(torch.utils.data.BatchSampler):
    """Takes 0.3 s to draw an epoch's order (reading an index of files, say): torch's loader
    with workers draws its first batches as its iterator starts them, inside ``iter()``."""

    def __iter__(self):
        time.sleep(0.3)
        yield from super().__iter__()


@pytest.mark.slow  # real workers, started each epoch: seconds
def test_what_an_epoch_s_iterator_takes_to_start_is_paid_at_its_start() -> None:
    draws = _SlowToDraw(torch.utils.data.SequentialSampler(range(96)), 4, drop_last=False)
    once = dataclasses.replace(WINDOW, target_spread=0.0)
    loader = Manual(torch.zeros(96, 1), batch_sampler=draws, num_workers=2, window=once)
    for _ in range(3):
        for _ in loader:
            pass
    begun = [r for r in loader.readings if r.epoch_start_s]
    assert begun and all(r.epoch_start_s > 0.3 for r in begun)
    assert all(r.between_epochs_s < 0.3 for r in loader.readings)  # never the loop's time


def test_uneven_spans_are_grouped_until_they_agree() -> None:
    loop = Loop(Meter(PipelineConfig(decoder=AS_IS), WINDOW, after_switch=False))
    for _ in range(2):
        loop.batch(wait=0.0, step=0.1)
    steps = iter([0.1, 0.1, 0.5] * 40)  # sub-windows of 0.2 s and 0.6 s: far apart
    while not loop.meter.done:
        loop.batch(wait=0.0, step=next(steps))
    loop.meter.requested()
    assert len(loop.meter.tally.spans) > WINDOW.sub_windows  # more than one set


def test_the_loader_reads_each_setting_on_the_real_loop() -> None:
    data = torch.arange(256.0).reshape(256, 1)
    once = dataclasses.replace(WINDOW, target_spread=0.0)  # one set of spans, however uneven
    loader = Manual(data, batch_size=4, window=once)
    weight = torch.randn(64, 64)
    for index, batch in enumerate(loader):
        (weight @ weight).sum() + batch.sum()  # the step
        if index == 24:
            loader.switch(PipelineConfig(decoder=AS_IS, num_workers=1))
    readings = loader.readings
    assert readings and all(r.samples_per_s > 0 for r in readings)
    assert {r.settings.num_workers for r in readings} == {0, 1}
    switched = [r for r in readings if r.settings.num_workers == 1]
    assert switched[0].first_batch_s > 0  # the new worker's start, charged to the switch
    (switch,) = loader.switches
    assert switch.first_batch_s == switched[0].first_batch_s and switch.shutdown_s >= 0
    assert all(0.0 <= r.data_wait <= 1.0 for r in readings)


class Custom:
    """A batch of the user's own type: nothing the count can read."""

    def __init__(self, samples: list[torch.Tensor]) -> None:
        self.samples = samples


def test_a_batch_of_the_user_s_own_type_is_counted_at_the_batch_size() -> None:
    once = dataclasses.replace(WINDOW, target_spread=0.0)
    loader = Manual(torch.zeros(96, 1), batch_size=4, collate_fn=Custom, window=once)
    assert all(isinstance(batch, Custom) for batch in loader)  # the training goes on
    reading = loader.readings[0]
    assert reading.batches * 4 == pytest.approx(reading.samples_per_s * reading.seconds)


def test_a_batch_sampler_s_batches_are_counted_by_their_samples() -> None:
    sampler = torch.utils.data.BatchSampler(range(96), 4, False)  # torch: batch_size None
    once = dataclasses.replace(WINDOW, target_spread=0.0)
    loader = Manual(torch.zeros(96, 1), batch_sampler=sampler, window=once)
    sum(1 for _ in loader)
    reading = loader.readings[0]
    assert reading.batches * 4 == pytest.approx(reading.samples_per_s * reading.seconds)


def test_a_cap_shortens_the_sub_windows_and_ends_the_timing() -> None:
    window = dataclasses.replace(WINDOW, min_sub_window_s=1.0, max_timed_s=20.0)
    # 0.1 s a batch: 10 batches/s; capped at 0.6 s for three sub-windows of 0.2 s each
    loop = Loop(
        Meter(PipelineConfig(decoder=AS_IS), window, after_switch=False, cap_s=lambda r: 6 / r)
    )
    for _ in range(2):
        loop.batch(wait=0.0, step=0.1)
    reading = loop.until_read(wait=0.0, step=0.1)
    assert reading.batches == 3 * 2  # without the cap: three sub-windows of 1 s, 10 batches
    assert reading.seconds == pytest.approx(0.6)


@pytest.mark.parametrize(("epoch", "untimeable"), [(6, True), (7, False)])
def test_a_setting_no_whole_epoch_can_time_is_untimeable(epoch, untimeable) -> None:
    # an epoch's first batch and 2 extra: a warm-up of 3 batches, then sub-windows of 4
    # (whole rounds of 4 workers); their prefetch, drained by no epoch but the run's first,
    # is no part of it
    settings = PipelineConfig(decoder=AS_IS, num_workers=4, prefetch_factor=8)
    loop = Loop(Meter(settings, WINDOW, after_switch=False))
    for _ in range(3):  # the first epoch may be partial: two whole ones after it
        for _ in range(epoch):
            loop.batch(wait=0.01, step=0.1)
        loop.meter.requested()
        loop.meter.epoch_ended()
    assert loop.meter.untimeable is untimeable


@pytest.mark.parametrize("why", ["shorter", "timed_before"])
def test_an_epoch_that_times_no_span_says_nothing_where_the_setting_may_yet_be_timed(why):
    """Epochs of 6 batches time no span of the setting above. Where the run has read longer
    epochs (a bucketing sampler's vary), or an earlier meter timed the setting, such an
    epoch is no verdict: the setting is not untimeable, and a longer epoch times it."""
    settings = PipelineConfig(decoder=AS_IS, num_workers=4, prefetch_factor=8)
    meter = Meter(settings, WINDOW, after_switch=False, timed_before=why == "timed_before")
    loop = Loop(meter)
    for _ in range(3):
        for _ in range(6):
            loop.batch(wait=0.01, step=0.1)
        meter.requested()
        meter.epoch_ended(shorter=why == "shorter")
        assert not meter.untimeable
    if why == "timed_before":  # nor a pass the loop leaves as short
        assert not meter.epoch_left(3) and not meter.untimeable
    for _ in range(12):
        loop.batch(wait=0.01, step=0.1)
    assert meter.tally.spans


def test_a_switch_at_an_epoch_s_end_is_timed_in_the_next_epoch_not_untimeable() -> None:
    """Switched as the loop asks past an epoch's last batch: the next epoch's first batch is
    the switch's cost, standing for the epoch's own first, so that epoch times the setting.
    Such an epoch used to count as whole one batch short, and a setting that fits failed."""
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=2)
    meter = Meter(settings, WINDOW, epoch_batches=5)  # after a switch: 2 extra, then 2
    loop = Loop(meter)
    meter.requested()  # the switch, at the request that ends the epoch
    meter.epoch_ended()
    for epoch in range(2):
        for _ in range(5):
            loop.batch(wait=0.01, step=0.1)
        meter.requested()
        meter.epoch_ended()
        assert not meter.untimeable
        assert len(meter.tally.spans) == epoch + 1  # each epoch timed a span


def test_a_switch_made_past_an_epoch_s_last_batch_is_timed_on_the_real_loop() -> None:
    """Epochs of 16 batches: the switch's first batch, `w2 pf2`'s 4 extra warm-up batches
    and a sub-window fit in the one after the switch (to workers that persist: made there)."""
    loader = Manual(torch.zeros(64, 1), batch_size=4)
    settings = PipelineConfig(
        decoder=AS_IS, num_workers=2, prefetch_factor=2, persistent_workers=True
    )
    for index, _ in enumerate(loader):
        if index == len(loader) - 1:
            loader.switch(settings)  # made as the loop asks past the epoch's last batch
    assert loader.meter.settings.num_workers == 2
    for _ in range(2):
        sum(1 for _ in loader)
        assert not loader.meter.untimeable
    assert loader.meter.tally.spans  # timed in the whole epoch after


@pytest.mark.parametrize(
    ("epoch_batches", "untimeable"), [(None, True), (12, False), ("learned", False)]
)
def test_a_sub_window_fits_what_an_epoch_leaves_after_its_warm_up(epoch_batches, untimeable):
    # 10 batches/s and 1 s sub-windows ask for 10 batches; an epoch of 12 leaves 9 after the
    # warm-up (its first batch + 2 extra): sub-windows of 8 (whole rounds of 2 workers),
    # where it is known, or learned as the first epoch ends (a stream's)
    window = dataclasses.replace(WINDOW, min_sub_window_s=1.0)
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=2)
    known = epoch_batches if isinstance(epoch_batches, int) else None
    meter = Meter(settings, window, after_switch=False, epoch_batches=known)
    loop = Loop(meter)
    for _ in range(4):
        for _ in range(12):
            loop.batch(wait=0.0, step=0.1)
        loop.meter.requested()
        if epoch_batches == "learned":
            loop.meter.sized(12)
        loop.meter.epoch_ended()
    assert loop.meter.untimeable is untimeable
    if not untimeable:
        assert loop.meter.done and loop.meter.reading().batches == 3 * 8


@pytest.mark.parametrize(("pass_batches", "untimeable"), [(12, False), (4, True)])
def test_a_loop_that_leaves_each_epoch_early_is_timed_in_sub_windows_that_fit_a_pass(
    pass_batches, untimeable
) -> None:
    # 10 batches/s and 1 s sub-windows ask for 10 batches. A pass of 12 can be timed over 11
    # (its last step ends with no request for the next), 8 after the warm-up (its first batch
    # + 2 extra) in whole rounds of 2 workers; a pass of 4 holds no warm-up and sub-window
    window = dataclasses.replace(WINDOW, min_sub_window_s=1.0)
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=2)
    loop = Loop(Meter(settings, window, after_switch=False, epoch_batches=100))
    said = []
    for _ in range(6):
        for _ in range(pass_batches):
            loop.batch(wait=0.0, step=0.1)
        said.append(loop.meter.epoch_left(pass_batches - 1))  # a break, as the loop leaves
    assert loop.meter.untimeable is untimeable and said.count(True) == untimeable  # once
    if not untimeable:
        assert loop.meter.done and loop.meter.reading().batches == 3 * 8


def test_a_setting_longer_passes_timed_is_read_as_it_stands_where_the_loop_leaves_sooner():
    """A loop that leaves at varying batches: passes of 12 timed a sub-window of 8 (as
    above); then it leaves after 4, where no warm-up and sub-window fit. The setting was
    timed: its reading is done as it stands, not failed as untimeable."""
    window = dataclasses.replace(WINDOW, min_sub_window_s=1.0)
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=2)
    loop = Loop(Meter(settings, window, after_switch=False, epoch_batches=100))
    for _ in range(2):  # the first sized for the epoch, the second for the pass
        for _ in range(12):
            loop.batch(wait=0.0, step=0.1)
        assert not loop.meter.epoch_left(11)
    assert len(loop.meter.tally.spans) == 1 and not loop.meter.done
    for _ in range(4):
        loop.batch(wait=0.0, step=0.1)
    assert not loop.meter.epoch_left(3) and not loop.meter.untimeable
    assert loop.meter.done and loop.meter.reading().batches == 8


def test_spans_that_disagree_are_timed_on_only_while_the_wall_time_they_cost_fits() -> None:
    """Epochs of 8 batches time two spans of 2 each (after a warm-up of 3), and the spans
    disagree: another set is timed while it fits in 1.2 s. Each epoch's warm-up steps 0.3 s
    for its 0.02-0.06 s spans: counted, the setting is done after two sets of three spans,
    in 3 epochs; only the spans counted, it went on for 12, past its whole budget."""
    window = dataclasses.replace(WINDOW, target_spread=0.1, max_timed_s=1.2)
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=2)
    meter = Meter(settings, window, after_switch=False, epoch_batches=8, whole_epoch=False)
    loop = Loop(meter)
    epochs = 0
    while not meter.done and epochs < 20:
        for index in range(8):
            step = 0.1 if index < 3 else (0.01 if epochs % 2 else 0.03)
            loop.batch(wait=0.0, step=step)
        meter.requested()
        meter.epoch_ended()
        epochs += 1
    assert meter.done and len(meter.tally.spans) == 6 and epochs == 3


def test_a_pause_of_the_loop_s_own_mid_epoch_is_no_part_of_the_reading() -> None:
    """Every 12 batches the loop validates for 2 s, in the middle of its epoch; its steps
    are 0.1 s, each batch waited 0.1 s. The pauses are not timed (after each, a warm-up of
    the buffer its workers filled meanwhile, then a span): the setting reads 4 samples a
    0.2 s batch, as without them; they counted as its time, it read far slower."""
    window = dataclasses.replace(WINDOW, target_spread=0.1, min_sub_window_s=0.5)
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=2)
    meter = Meter(settings, window, after_switch=False)
    loop = Loop(meter)
    batches = 0
    while not meter.done and batches < 400:
        loop.batch(wait=0.1, step=0.1)
        batches += 1
        if batches % 12 == 0:
            loop.now += 2.0  # validating
    meter.requested()
    reading = meter.reading()
    assert reading.samples_per_s == pytest.approx(20.0) and reading.spread < 0.01
    assert reading.between_epochs_s > 2.0  # the loop's own, never charged to it


def test_a_meter_made_at_a_switch_as_an_epoch_starts_leaves_the_loop_s_time_since_out():
    """The loop validated for 2 s after the epoch's end; the switch to a proposal came with
    the next epoch's first batch. Those 2 s are the loop's: the proposal's reading says so,
    and its charge leaves them out. It used to be charged them."""
    settings = PipelineConfig(decoder=AS_IS, num_workers=2, prefetch_factor=2)
    earlier = Meter(dataclasses.replace(settings, num_workers=0, prefetch_factor=None), WINDOW)
    loop = Loop(earlier)
    for _ in range(4):
        loop.batch(wait=0.01, step=0.1)
    earlier.requested()
    earlier.epoch_ended()
    loop.now += 2.0  # validating
    later = Meter(settings, WINDOW).follows(earlier)
    later._clock = earlier._clock
    later.requested()  # the switch's first batch
    assert later.reading().between_epochs_s == pytest.approx(2.0)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_sample_s_wall_and_cpu_in_the_loader_are_read_over_the_spans(workers) -> None:
    """Each batch of 4 waited 0.1 s and stepped 0.1 s. Without workers, 0.02 s of CPU of each
    wait was the training process's own (reading its samples), and 0.01 s it was queued for
    a CPU; with two, the workers used 0.05 s of CPU a batch between them, and were queued
    0.03 s."""
    settings = PipelineConfig(
        decoder=AS_IS, num_workers=workers, prefetch_factor=1 if workers else None
    )
    thread, worker_cpu, process = [0.0, 0.0], [0.0, 0.0], [0.0]
    meter = Meter(
        settings, WINDOW, after_switch=False, thread_cpu=lambda: CpuTimes(*thread),
        workers_cpu=lambda: CpuTimes(*worker_cpu), process_cpu=lambda: process[0],
    )  # fmt: skip
    loop = Loop(meter)
    while not meter.done:
        meter.requested()
        loop.now += 0.1
        if not workers:
            thread[0], thread[1] = thread[0] + 0.02, thread[1] + 0.01
        worker_cpu[0], worker_cpu[1] = worker_cpu[0] + 0.05, worker_cpu[1] + 0.03
        meter.received(BATCH)
        loop.now += 0.1
        thread[0] += 0.08  # the step: not the loader's
        process[0] += 0.08 + (0.02 if not workers else 0.0)  # the step, and the reads
    reading = meter.reading()
    if workers:  # each worker had the whole span: 2 x 0.2 s for 4 samples
        assert reading.sample_wall_s == pytest.approx(2 * 0.2 / 4)
        assert reading.sample_cpu_s == pytest.approx(0.05 / 4)
        assert reading.sample_queued_s == pytest.approx(0.03 / 4)
    else:  # the waits inside __next__, and the CPU there
        assert reading.sample_wall_s == pytest.approx(0.1 / 4)
        assert reading.sample_cpu_s == pytest.approx(0.02 / 4)
        assert reading.sample_queued_s == pytest.approx(0.01 / 4)
    # this process's and its workers' CPU over the timed spans, a batch each 0.2 s
    per_batch = 0.08 + (0.05 if workers else 0.02)
    assert reading.cpu_s == pytest.approx(per_batch * reading.batches)


def test_workers_whose_cpu_cannot_be_read_leave_the_loader_unread() -> None:
    settings = PipelineConfig(decoder=AS_IS, num_workers=1, prefetch_factor=1)
    meter = Meter(settings, WINDOW, after_switch=False, workers_cpu=lambda: None)
    loop = Loop(meter)
    while not meter.done:
        loop.batch(wait=0.1, step=0.1)
    assert meter.reading().sample_cpu_s == meter.reading().sample_wall_s == 0.0


def test_the_loop_s_time_between_epochs_is_read_apart() -> None:
    loop = Loop(Meter(PipelineConfig(decoder=AS_IS), WINDOW, after_switch=False))
    for _ in range(3):
        loop.batch(wait=0.0, step=0.1)
    loop.meter.epoch_ended()
    loop.now += 60.0  # the loop validates
    loop.batch(wait=0.0, step=0.1)
    assert loop.meter.reading().between_epochs_s == pytest.approx(60.0)


def test_a_loop_that_leaves_its_epochs_early_pays_each_pass_s_start_over_its_own_batches() -> None:
    # 16 batches an epoch; the loop reads 5 of each, as a loop of steps per epoch does
    loader = Manual(torch.zeros(64, 1), batch_size=4, window=WINDOW)
    for _ in range(3):
        for index, _ in enumerate(loader):
            if index == 4:
                break
    assert loader.pass_length == 5
    sum(1 for _ in loader)  # a whole epoch: an epoch's batches from here
    assert loader.pass_length == 16
