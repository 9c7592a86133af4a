"""Tests for autotune.online.drift: a span of readings off the same way is a drift; noise,
or readings off both ways, is not."""

from __future__ import annotations

import math

import pytest

from autotune.online.drift import SUSTAINED, DriftWatch
from autotune.online.reading import Reading
from autotune.pipeline.config import AS_IS, PipelineConfig

KEPT = Reading(PipelineConfig(decoder=AS_IS), 100.0, 0.04, 0.2, 0.0, batches=10, seconds=1.0)


def at(rate: float, spread: float = 0.02) -> Reading:
    return Reading(KEPT.settings, rate, spread, 0.2, 0.0, batches=10, seconds=1.0)


@pytest.mark.parametrize("rate", [70.0, 130.0])
def test_readings_off_the_same_way_in_a_row_are_a_drift(rate) -> None:
    watch = DriftWatch(KEPT)
    assert [watch.drifted(at(rate)) for _ in range(SUSTAINED)] == [False] * (SUSTAINED - 1) + [
        True
    ]


def test_noise_and_readings_off_both_ways_are_not() -> None:
    watch = DriftWatch(KEPT)
    assert not any(watch.drifted(at(r)) for r in (108.0, 93.0, 109.0, 91.0))  # within 10 %
    assert not any(watch.drifted(at(r)) for r in (80.0, 80.0, 120.0, 120.0))  # not one way
    assert not watch.drifted(at(80.0, spread=0.3))  # the reading's own spread is wider


def test_a_reading_within_the_noise_starts_the_count_again() -> None:
    watch = DriftWatch(KEPT)
    rates = [70.0] * (SUSTAINED - 1) + [100.0] + [70.0] * (SUSTAINED - 1)
    assert not any(watch.drifted(at(r)) for r in rates)
    assert watch.drifted(at(70.0))


def test_short_readings_off_are_a_drift_only_once_they_span_enough_time() -> None:
    watch = DriftWatch(KEPT)
    brief = Reading(KEPT.settings, 60.0, 0.02, 0.2, 0.0, batches=2, seconds=0.1)
    assert not any(watch.drifted(brief) for _ in range(SUSTAINED * 5))  # 1.5 s of them
    assert any(watch.drifted(brief) for _ in range(SUSTAINED * 10))  # then 4.5 s


def test_a_fall_by_a_factor_counts_as_a_rise_by_it_however_noisy_the_kept_reading() -> None:
    """A spread over 100 % (short spans on a busy machine) still lets a tenfold fall count,
    as it lets a tenfold rise: a rate cannot fall by more than all of itself."""
    noisy = Reading(KEPT.settings, 100.0, 1.2, 0.2, 0.0, batches=10, seconds=1.0)
    for rate in (10.0, 1000.0):
        watch = DriftWatch(noisy)
        assert [watch.drifted(at(rate)) for _ in range(SUSTAINED)][-1], rate
    watch = DriftWatch(noisy)
    assert not any(watch.drifted(at(r)) for r in (50.0, 200.0) * 3)  # within 2.2x: noise


def test_first_readings_far_off_the_rate_an_earlier_run_kept_are_another_job() -> None:
    """The fingerprint cannot see the transform, the model or the step: half or twice the
    rate the setting was kept at, read over a drift's span, is not the job it was kept for."""
    for rate in (45.0, 220.0):
        watch = DriftWatch(kept_rate=100.0)
        assert [watch.drifted(at(rate)) for _ in range(SUSTAINED)][-1], rate
        assert f"reads {rate:.0f} samples/s, kept at 100 by an earlier run" in watch.why
    # a machine a third slower or faster than in the earlier run is not, however long
    for rate in (75.0, 133.0):
        watch = DriftWatch(kept_rate=100.0)
        assert not any(watch.drifted(at(rate)) for _ in range(SUSTAINED * 2)), rate
    # nor readings whose own spread is as wide as the difference, nor without an earlier
    # rate (an offline study's pick): the first reading is the run's own reference then
    watch = DriftWatch(kept_rate=100.0)
    assert not any(watch.drifted(at(45.0, spread=1.5)) for _ in range(SUSTAINED * 2))
    watch = DriftWatch()
    assert not any(watch.drifted(at(10.0)) for _ in range(SUSTAINED * 2))


def test_a_reading_at_the_kept_rate_ends_the_check_and_is_the_run_s_reference() -> None:
    watch = DriftWatch(kept_rate=100.0)
    assert not any(watch.drifted(at(40.0)) for _ in range(SUSTAINED - 1))  # not yet a span
    assert not watch.drifted(at(80.0))  # within JOB_CHANGED: this job, watched from here
    assert watch.kept is not None and watch.kept.samples_per_s == 80.0
    assert not any(watch.drifted(at(80.0)) for _ in range(SUSTAINED * 2))
    assert [watch.drifted(at(40.0)) for _ in range(SUSTAINED)][-1]  # off its own: a drift
    assert watch.why == "its rate moved"


def test_a_kept_rate_that_is_no_rate_is_none() -> None:
    """A note edited by hand: no rate to compare with, never an error in the training."""
    for kept_rate in (math.inf, math.nan, 0.0, -5.0):
        assert not DriftWatch(kept_rate=kept_rate).drifted(at(10.0)), kept_rate
