"""Tests for autotune.online.pauses: a step far longer than the loop's usual one is a pause
of its own (it validates or saves mid-epoch); a slower step now and then is not."""

from __future__ import annotations

import logging
import time

import pytest

import autotune
from autotune.online.pauses import PAUSE_MIN_S, StepWatch


def _steps(watch: StepWatch, seconds: list[float]) -> list[float]:
    """Each step of ``seconds``, from a batch received to the next asked for: the pauses."""
    now, paused = 0.0, []
    for step in seconds:
        watch.received(now)
        now += step
        paused.append(watch.paused(now))
    return paused


def test_a_step_far_longer_than_the_usual_is_a_pause_and_leaves_the_usual_as_it_was() -> None:
    watch = StepWatch()
    paused = _steps(watch, [0.01] * 8 + [0.5] + [0.01] * 2 + [0.5])
    assert paused == pytest.approx([0.0] * 8 + [0.5] + [0.0] * 2 + [0.5])
    assert watch.apart == 9  # read up to the first (its own step the pause), unforgotten since
    watch.forget()  # a warm-up after it, as the meter begins one
    _steps(watch, [0.01] * 3 + [0.5])
    assert watch.apart == 4  # the fewest: the loop's between two pauses


def test_steps_that_vary_a_few_times_over_or_a_short_long_one_are_no_pause() -> None:
    watch = StepWatch()
    assert not any(_steps(watch, [0.01, 0.03, 0.005, 0.04, 0.02] * 4))
    assert not any(_steps(StepWatch(), [0.001] * 8 + [PAUSE_MIN_S * 0.9]))  # 180x, but short


def test_the_first_step_after_a_warm_up_begins_is_not_watched() -> None:
    watch = StepWatch()
    _steps(watch, [0.01] * 8)
    watch.forget()  # an epoch's end: the loop's time between epochs is counted apart
    assert watch.paused(100.0) == 0.0


def test_steps_that_stay_far_longer_are_the_loop_s_usual_step_from_the_third() -> None:
    """The loop's work grew for good (a longer sequence, a bigger batch of its own): two
    pauses, then its usual step; else no step of it would ever be timed."""
    watch = StepWatch()
    paused = _steps(watch, [0.01] * 8 + [0.5] * 5)
    assert paused == pytest.approx([0.0] * 8 + [0.5, 0.5, 0.0, 0.0, 0.0])


@pytest.mark.slow  # two epochs of a real loop that pauses: seconds
def test_a_loop_that_pauses_too_often_to_time_is_told_its_pauses_are_why(tmp_path, caplog):
    """A save every 8 of its 32 batches: a warm-up after each pause and one sub-window do
    not fit in 8 batches. The log names the pauses, not the epoch (which would fit)."""
    loader = autotune.DataLoader(range(128), batch_size=4, storage=f"sqlite:///{tmp_path}/a.db")
    with caplog.at_level(logging.INFO, logger="autotune"):
        for _ in range(3):
            for step, _batch in enumerate(loader, start=1):
                time.sleep(0.002)  # the step
                if step % 8 == 0:
                    time.sleep(PAUSE_MIN_S * 1.25)  # the save
    assert "longer than the 8 batches your loop reads between its pauses" in caplog.text
