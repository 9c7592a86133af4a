"""Naming a winner: finalists, the memory budget, ties, and the interleaved re-measurement."""

from __future__ import annotations

import optuna
import pytest
from helpers import make_session
from optuna.distributions import CategoricalDistribution, IntDistribution

from autotune.pipeline.config import PipelineConfig
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.tuner.confirm import confirm, finalists
from autotune.tuner.metrics import Confirmed, pick_each_way

BASELINE = PipelineConfig(batch_size=32, main_threads=2, decoder="as_is")


def _trial(value: float, workers: int, *, constraint: float = 0.0, decoder: str = "pil"):
    config = PipelineConfig(
        batch_size=32,
        num_workers=workers,
        prefetch_factor=2 if workers else None,
        main_threads=1,
        decoder=decoder,
    )
    return optuna.trial.create_trial(
        params={"num_workers": workers, "decoder": decoder},
        distributions={
            "num_workers": IntDistribution(0, 4),
            "decoder": CategoricalDistribution(["as_is", "pil", "pil_reduced", "opencv"]),
        },
        value=value,
        user_attrs={"pipeline": config.to_dict(), "constraint": constraint},
    )


def test_finalists_are_distinct_feasible_and_best_first():
    study = optuna.create_study(direction="maximize")
    for trial in (
        _trial(300, 2),
        _trial(900, 4, constraint=0.5),
        _trial(310, 2),
        _trial(250, 1),
        _trial(200, 0),
    ):
        study.add_trial(trial)
    picked = finalists(study, 3, BASELINE)
    assert picked[0] == ("baseline", None, BASELINE)
    numbers = [number for _, number, _ in picked[1:]]
    assert 1 not in numbers  # over the memory budget: never a finalist, never exported
    assert numbers == [2, 3, 4]  # 310 (w2), then 250 (w1): the duplicate w2 config is dropped


def test_each_way_of_applying_gets_its_own_finalists():
    """The pipeline as it is is slower than the tuner's here, yet its best configs are
    confirmed too: loader_kwargs needs a pick of its own."""
    study = optuna.create_study(direction="maximize")
    for trial in (
        _trial(500, 2, decoder="opencv"),
        _trial(480, 1, decoder="opencv"),
        _trial(450, 2, decoder="pil"),
        _trial(300, 2, decoder="as_is"),
        _trial(250, 1, decoder="as_is"),
        _trial(240, 0, decoder="as_is"),
    ):
        study.add_trial(trial)
    picked = finalists(study, 2, BASELINE)
    assert [number for _, number, _ in picked[1:]] == [0, 1, 3, 4]
    assert [c.as_is for _, _, c in picked] == [True, False, False, True, True]
    # an as-is config among the best overall counts for its way too
    study.add_trial(_trial(600, 3, decoder="as_is"))
    assert [number for _, number, _ in finalists(study, 2, BASELINE)[1:]] == [6, 0, 3]


def test_confirmation_interleaves_the_finalists():
    session = make_session(  # steady rates: 300 is 300
        ["study.epoch_aware=false", "window.max_timed_s=2", "window.confirm_max_timed_s=7"]
    )
    order = []

    def run(job, *, timeout_s):
        assert job.window.max_timed_s == 7  # a ranking run may grow longer than a search's
        order.append(job.pipeline.num_workers)
        rate = 100.0 * (1 + job.pipeline.num_workers)
        m = Measurement(rate, (rate, rate), 0.1, 0.01, 4, 8)
        return TrialOutcome("ok", measurement=m)

    picked = [
        ("baseline", None, BASELINE),
        ("trial 3", 3, PipelineConfig(num_workers=2, prefetch_factor=2)),
    ]
    confirmed = confirm(session, picked, rounds=3, run=run)
    assert order == [0, 2, 0, 2, 0, 2]  # A B A B A B: drift hits both alike
    assert [c.rounds for c in confirmed] == [3, 3]
    assert confirmed[1].round_rates == pytest.approx((300.0, 300.0, 300.0))  # one a round
    assert confirmed[1].median == pytest.approx(300.0)
    assert confirmed[1].spread == 0.0 and confirmed[1].to_dict()["spread"] == 0.0


def test_finalists_race_the_clearly_beaten_leave_and_are_no_pick():
    session = make_session(
        ["study.epoch_aware=false", "window.max_timed_s=2", "window.confirm_max_timed_s=7"]
    )
    rates = {0: 100.0, 1: 300.0, 2: 295.0, 3: 150.0}  # by num_workers; 2% run to run
    order, lengths = [], []

    def run(job, *, timeout_s):
        workers = job.pipeline.num_workers
        order.append(workers)
        lengths.append(job.window.max_timed_s)
        rate = rates[workers] * (1.02 if len(order) % 2 else 1.0)
        return TrialOutcome("ok", measurement=Measurement(rate, (rate, rate), 0.1, 0.01, 4, 8))

    def tuned(workers: int) -> PipelineConfig:
        return PipelineConfig(num_workers=workers, prefetch_factor=2, decoder="pil")

    picked = [("baseline", None, BASELINE)] + [(f"trial {w}", w, tuned(w)) for w in (1, 2, 3)]
    searched = {"baseline": 100.0, "trial 1": 300.0, "trial 2": 295.0, "trial 3": 150.0}
    confirmed = confirm(session, picked, rounds=3, run=run, searched=searched)
    # round 1 measures all; then trial 3 (half the leader's rate) is measured no more; the
    # baseline stays however slow, and trial 2 stays: within the noise of trial 1
    assert order == [0, 1, 2, 3, 0, 1, 2, 0, 1, 2]
    # the round that sorts every finalist is a search trial's length; the ranking ones long
    assert lengths == [2] * 4 + [7] * 6
    by_label = {c.label: c for c in confirmed}
    assert by_label["trial 3"].raced_out == 1 and by_label["trial 3"].rounds == 1
    assert by_label["trial 3"].to_dict()["raced_out"] == 1
    assert all(by_label[k].raced_out is None for k in ("baseline", "trial 1", "trial 2"))
    # without the search's rates nothing tells how noisy runs are: nobody leaves
    order.clear()
    assert all(c.raced_out is None for c in confirm(session, picked, rounds=2, run=run))
    assert order == [0, 1, 2, 3] * 2


def test_a_finalist_that_left_the_race_is_no_pick():
    rows = [
        Confirmed("baseline", None, BASELINE, (100.0,)),
        Confirmed("trial 1", 1, PipelineConfig(num_workers=1, prefetch_factor=2), (300.0,)),
        Confirmed(
            "trial 2", 2, PipelineConfig(num_workers=2, prefetch_factor=2), (900.0,), raced_out=1
        ),
    ]
    winner, _, _ = pick_each_way(rows)
    assert winner.label == "trial 1"


def test_figures_from_the_search_pass_over_a_repeat_of_a_finalist():
    """Without a confirmation (confirm_top_k=0, or Ctrl-C during it) the search's figures
    stand; a repeat of a finalist holds its value and no measurement of its own."""
    from autotune.tuner.confirm import from_search
    from autotune.tuner.store import TrialKey

    config = PipelineConfig(num_workers=1, prefetch_factor=2, decoder="pil")
    measured = {
        TrialKey.STEADY: 300.0,
        TrialKey.SUB_WINDOWS: [290.0, 310.0],
        TrialKey.EPOCH_START: 0.2,
        TrialKey.TIME_TO_FIRST_BATCH: 0.3,
        TrialKey.PEAK_MEMORY_MB: 100.0,
        TrialKey.SPREAD: 0.07,
    }
    study = optuna.create_study(direction="maximize")
    for attrs in (measured, {TrialKey.REPEAT_OF: 0}):
        study.add_trial(
            optuna.trial.create_trial(
                params={},
                distributions={},
                value=300.0,
                user_attrs={"pipeline": config.to_dict(), **attrs},
            )
        )
    (row,) = from_search(study, [("trial 0", 0, config)], epoch_samples=None)
    assert row.sub_windows == (290.0, 310.0) and row.spread == 0.07
