"""Tests for autotune.online.budget: what ``tune=`` gives, and what each proposal costs."""

from __future__ import annotations

import pytest

from autotune.online.budget import DEFAULT_SHARE, RUN_SHARE, Budget, shares
from autotune.online.meter import Reading
from autotune.pipeline.config import PipelineConfig


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


def test_after_a_drift_a_long_run_gets_a_fresh_start_s_budget_not_its_tenth_again() -> None:
    now = [0.0]
    budget = Budget(share=1.0, run_share=0.1, batches_per_epoch=50, clock=lambda: now[0])
    budget.first_reading(Reading(PipelineConfig(), 100.0, 0.0, 0.0, 0.0, batches=10, seconds=1.0))
    now[0] = 1000.0  # a tenth of the run so far (100 s), all spent
    budget.spent_s = 101.0
    assert budget.short
    budget.afresh()  # the kept setting's rate moved
    assert budget.left_s() == pytest.approx(5.0)  # an epoch's time, as at the run's start
    now[0] = 1010.0  # and it grows with the run from here
    assert budget.left_s() == pytest.approx(6.0)
