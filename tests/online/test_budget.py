"""Tests for autotune.online.budget: what ``tune=`` gives, and what each proposal costs."""

from __future__ import annotations

import pytest

from autotune.online.budget import (
    DEFAULT_SHARE,
    RUN_SHARE,
    SETTINGS_IN_BUDGET,
    Budget,
    charged,
    setting_cap,
    shares,
)
from autotune.online.passes import Passes
from autotune.online.reading import Reading
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.schema import WindowConfig


def test_tune_gives_an_epoch_or_a_tenth_of_the_run_a_number_of_epochs_or_nothing(
    monkeypatch,
) -> None:
    assert shares(True) == (DEFAULT_SHARE, RUN_SHARE)
    assert shares(3) == (3.0, 0.0) and shares(0.25) == (0.25, 0.0)
    assert shares(False) == (0.0, 0.0)
    monkeypatch.setenv("AUTOTUNE", "off")
    assert shares(True) == (0.0, 0.0)
    with pytest.raises(ValueError, match="tune must be True, False or a share >= 0"):
        shares("yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="got nan"):
        shares(float("nan"))  # no budget, not an endless one


def test_a_stream_s_budget_has_its_unit_once_its_first_epoch_ends_and_charges_epochs() -> None:
    now = [0.0]
    budget = Budget(share=2.0, whole_epochs=True, clock=lambda: now[0])
    budget.first_reading(Reading(PipelineConfig(), 100.0, 0.0, 0.0, 0.0, batches=10, seconds=1.0))
    assert budget.short and budget.grows  # no unit yet: nothing to spend, but it will come
    budget.epoch_ended(50)  # 50 batches at 10 a second: an epoch is 5 s, the budget 10 s
    assert budget.left_s() == pytest.approx(10.0) and not budget.grows
    now[0] = 1.0
    budget.charge(asked_at=0.5)  # read half a second in: the rest of its epoch ran it too
    assert budget.left_s() == pytest.approx(5.0) and not budget.short
    budget.charge(asked_at=1.0)
    assert budget.short


def test_a_proposal_that_runs_a_whole_epoch_is_charged_its_workers_slow_start_too() -> None:
    """Under spawn or forkserver the start comes before the epoch's batches (``admission``)."""
    budget = Budget(share=4.0, whole_epochs=True, batches_per_epoch=50, clock=lambda: 1.0)
    budget.first_reading(Reading(PipelineConfig(), 100.0, 0.0, 0.0, 0.0, batches=10, seconds=1.0))
    assert budget.left_s() == pytest.approx(20.0)  # epochs of 5 s
    budget.charge(asked_at=0.5, start_s=6.0)
    assert budget.left_s() == pytest.approx(20.0 - 5.0 - 6.0)


def test_after_a_drift_a_long_run_gets_a_fresh_start_s_budget_not_its_tenth_again() -> None:
    now = [0.0]
    budget = Budget(share=1.0, run_share=0.1, batches_per_epoch=50, clock=lambda: now[0])
    budget.first_reading(Reading(PipelineConfig(), 100.0, 0.0, 0.0, 0.0, batches=10, seconds=1.0))
    now[0] = 1000.0  # a tenth of the run so far (100 s), all spent
    budget.spent_s = 101.0
    assert budget.short
    budget.afresh(Reading(PipelineConfig(), 100.0, 0.0, 0.0, 0.0, batches=10, seconds=1.0))
    assert budget.left_s() == pytest.approx(5.0)  # an epoch's time, as at the run's start
    now[0] = 1010.0  # and it grows with the run from here
    assert budget.left_s() == pytest.approx(6.0)


def test_every_setting_with_workers_is_charged_an_epoch_s_start_once_an_epoch() -> None:
    def read(persistent: bool, first_batch_s: float = 0.0, epoch_start_s: float = 0.0) -> Reading:
        settings = PipelineConfig(decoder=AS_IS, num_workers=2, persistent_workers=persistent)
        return Reading(
            settings, 100.0, 0.02, 0.1, first_batch_s, batches=10, seconds=1.0,
            epoch_start_s=epoch_start_s,
        )  # fmt: skip

    restarts: dict = {}
    # 100 samples/s at 0.1 s a batch; 20 batches an epoch (2 s) and 1 s more to start again
    once = charged(read(False, first_batch_s=1.1), restarts, batches_per_epoch=20)
    assert once.samples_per_s == pytest.approx(100.0 * 2.0 / 3.0)
    # read again without a start in it (mid-epoch, no switch): the start it was seen to cost
    assert charged(read(False), restarts, 20).samples_per_s == once.samples_per_s
    assert charged(read(False, first_batch_s=1.1), {}, None).samples_per_s == 100.0  # a stream's

    # workers that persist refill their buffer at each epoch's start: its first batch's wait
    # is what each epoch pays (0.5 s), where the reading saw one; else the switch's to them
    kept_alive: dict = {}
    refill = charged(read(True, first_batch_s=0.3, epoch_start_s=0.6), kept_alive, 20)
    assert refill.samples_per_s == pytest.approx(100.0 * 2.0 / 2.5)
    assert charged(read(True), kept_alive, 20).samples_per_s == refill.samples_per_s
    # till then the switch's, no more than a worker's batch (2 workers: 0.2 s, 0.1 s beyond
    # a batch's time); their own start, paid once a run, is not an epoch's
    switched = charged(read(True, first_batch_s=0.15), {}, 20)
    assert switched.samples_per_s == pytest.approx(100.0 * 2.0 / 2.05)
    started_slowly = charged(read(True, first_batch_s=1.1), {}, 20)  # a worker_init_fn of 1 s
    assert started_slowly.samples_per_s == pytest.approx(100.0 * 2.0 / 2.1)
    # a loader made anew each epoch starts its workers with it, persisting or not: all of it
    anew = charged(read(True, first_batch_s=1.1), {}, 20, made_anew=True)
    assert anew.samples_per_s == pytest.approx(once.samples_per_s)
    # the switch's stands in only till an epoch's start is read; where workers start again,
    # the most seen of either stays
    for persistent, charge in ((True, 0.5), (False, 1.0)):
        seen: dict = {}
        charged(read(persistent, first_batch_s=1.1), seen, 20)
        later = charged(read(persistent, epoch_start_s=0.6), seen, 20)
        assert later.samples_per_s == pytest.approx(100.0 * 2.0 / (2.0 + charge))
    # and none without workers: the loop reads its batches itself, an epoch's first as any
    own = Reading(PipelineConfig(decoder=AS_IS), 100.0, 0.02, 0.9, 0.0, 10, 1.0, epoch_start_s=2)
    assert charged(own, {}, 20).samples_per_s == 100.0


def test_the_loop_s_time_between_epochs_is_not_charged_to_a_proposal() -> None:
    now = [0.0]
    budget = Budget(share=1.0, batches_per_epoch=50, clock=lambda: now[0])
    budget.first_reading(Reading(PipelineConfig(), 100.0, 0.0, 0.0, 0.0, batches=10, seconds=1.0))
    now[0] = 4.0
    budget.charge(asked_at=0.0, between_epochs_s=3.0)  # 3 s of it the loop's validation
    assert budget.spent_s == pytest.approx(1.0)


def test_the_unit_is_an_epoch_at_the_best_rate_measured_so_far() -> None:
    """The run's own settings read 10 batches/s: an epoch of 100 batches is 10 s to spend.
    A setting found at 100 batches/s makes an epoch, and what exploring may spend, 1 s."""
    now = [0.0]
    budget = Budget(share=1.0, batches_per_epoch=100, clock=lambda: now[0])
    budget.first_reading(Reading(PipelineConfig(), 40.0, 0.0, 0.0, 0.0, batches=10, seconds=1.0))
    assert budget.left_s() == pytest.approx(10.0)
    budget.unit_at(Reading(PipelineConfig(), 400.0, 0.0, 0.0, 0.0, batches=100, seconds=1.0))
    assert budget.left_s() == pytest.approx(1.0)


def test_a_setting_is_timed_for_an_eighth_of_the_budget_at_the_best_rate_so_far() -> None:
    """An epoch of 800 batches, a budget of one: a setting read at 10 batches/s is timed for
    an eighth of 80 s before anything faster is known, of 16 s once one read 50 a second;
    never less than a trial's shortest timing."""
    window = WindowConfig(min_sub_window_s=0.4, sub_windows=3)
    assert setting_cap(1.0, 800, window)(10.0) == pytest.approx(80.0 / SETTINGS_IN_BUDGET)
    assert setting_cap(1.0, 800, window, 50.0)(10.0) == pytest.approx(16.0 / SETTINGS_IN_BUDGET)
    assert setting_cap(1.0, 40, window, 50.0)(10.0) == pytest.approx(1.2)


def test_a_pass_the_loop_leaves_early_is_its_epoch_until_it_reads_one_whole() -> None:
    passes = Passes()  # the loader's, read by the budget
    budget = Budget(share=1.0, batches_per_epoch=100, passes=passes)
    budget.first_reading(Reading(PipelineConfig(), 100.0, 0.0, 0.0, 0.0, batches=10, seconds=1.0))
    assert budget.left_s() == pytest.approx(10.0)  # 100 batches at 10 a second
    for _ in range(2):  # 30 steps an epoch: a pass is 3 s, its last step never timed
        for delivered in range(30):
            passes.asked_for(delivered)
        passes.left()
    assert (budget.left_s(), budget.timeable_batches) == (pytest.approx(3.0), 29)
    passes.ended(100)  # read whole: an epoch again
    assert (budget.left_s(), budget.timeable_batches) == (pytest.approx(10.0), 100)
