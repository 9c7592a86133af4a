"""The two ways searched side by side: a trial judged against its own way only, the as-is
way's share of the trials, and an as-is trial asked of the study's own TPE."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution

from autotune.tuner.ways import (
    BEATEN_BY,
    ClearlyBeaten,
    as_is_is_due,
    ask_for_as_is,
    is_as_is,
    make_pruner,
)

DECODER = CategoricalDistribution(["as_is", "pil", "opencv"])
WORKERS = IntDistribution(0, 4)


def _finished(decoder: str, rate: float) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        params={"decoder": decoder, "num_workers": 2},
        distributions={"decoder": DECODER, "num_workers": WORKERS},
        value=rate,
        intermediate_values={0: rate, 1: rate, 2: rate},
    )


def _running_at(study: optuna.Study, decoder: str, rate: float, steps: int = 3) -> optuna.Trial:
    study.enqueue_trial({"decoder": decoder, "num_workers": 1})
    trial = study.ask({"decoder": DECODER, "num_workers": WORKERS})
    for step in range(steps):
        trial.report(rate, step)
    return trial


def test_a_trial_is_pruned_only_for_losing_to_its_own_way() -> None:
    """As it is, 420 samples/s is a fine config among configs as they are (400), though the
    tuner's decoders (800) would have pruned it."""
    study = optuna.create_study(direction="maximize", pruner=make_pruner())
    for _ in range(3):
        study.add_trial(_finished("opencv", 800.0))
    study.add_trial(_finished("as_is", 400.0))
    assert not _running_at(study, "as_is", 420.0).should_prune()
    assert _running_at(study, "as_is", 300.0).should_prune()  # a loser of its own way
    assert _running_at(study, "pil", 420.0).should_prune()  # a loser of the other way
    everyone = optuna.create_study(direction="maximize", pruner=ClearlyBeaten())
    everyone.add_trials(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    assert _running_at(everyone, "as_is", 420.0).should_prune()  # what judging all would do


def test_only_a_clearly_beaten_trial_is_pruned_and_not_before_it_reports() -> None:
    """Within ``BEATEN_BY`` of the best it may still win: measured to the end. Before its
    window reports a rate (``run_window`` does where it has evidence) it is not judged at
    all; with nothing complete, nothing is."""
    study = optuna.create_study(direction="maximize", pruner=make_pruner())
    assert not _running_at(study, "pil", 1.0).should_prune()  # nothing to lose to yet
    study.add_trial(_finished("opencv", 800.0))
    near = 800.0 / (1 + BEATEN_BY) + 1
    assert not _running_at(study, "pil", near).should_prune()
    assert _running_at(study, "pil", near - 2).should_prune()
    assert not _running_at(study, "pil", 100.0, steps=0).should_prune()


def test_the_as_is_way_gets_its_share_of_the_trials() -> None:
    finished = [_finished("as_is", 400.0), _finished("opencv", 800.0)]  # the baseline, one
    assert not as_is_is_due(finished, 0.3)  # 1 of 3 would be as it is: a third already
    finished.append(_finished("pil", 700.0))
    assert as_is_is_due(finished, 0.3)  # 1 of 4: below the share
    assert not as_is_is_due(finished, 0.0)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # multivariate
def test_the_trial_asked_for_is_as_it_is_and_the_rest_still_searched() -> None:
    """With the study's own TPE (multivariate, grouped) past its random start."""
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(
            seed=0, n_startup_trials=2, multivariate=True, group=True
        ),
    )
    for _ in range(4):
        study.add_trial(_finished("opencv", 800.0))
    asked = []
    for _ in range(4):
        ask_for_as_is(study)
        trial = study.ask({"decoder": DECODER, "num_workers": WORKERS})
        asked.append(trial.params)
        study.tell(trial, 400.0)
    assert all(p["decoder"] == "as_is" for p in asked)
    assert is_as_is({}) and is_as_is({"decoder": "as_is"}) and not is_as_is({"decoder": "pil"})
