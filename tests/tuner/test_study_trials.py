"""The study's trials taken together: which measured, and the budget they spent."""

from __future__ import annotations

import optuna
from optuna.distributions import IntDistribution

from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure
from autotune.runtime.trial import TrialOutcome
from autotune.tuner import store, study_trials
from autotune.tuner.store import TrialKey

CONFIG = PipelineConfig(num_workers=2, prefetch_factor=4, decoder="opencv", main_threads=1)


def test_a_queued_trial_and_a_repeat_measured_nothing() -> None:
    study = optuna.create_study(direction="maximize")
    dist = {"num_workers": IntDistribution(0, 2)}
    for value, attrs in ((1.0, {}), (1.0, {TrialKey.REPEAT_OF: 0})):
        study.add_trial(
            optuna.trial.create_trial(
                params={"num_workers": 1}, distributions=dist, value=value, user_attrs=attrs
            )
        )
    study.enqueue_trial({"num_workers": 2})  # the worth table's variant, for the next run
    assert [t.number for t in study_trials.measured(study.get_trials())] == [0]


def test_a_trial_a_stop_interrupted_costs_no_budget() -> None:
    study = optuna.create_study(direction="maximize")
    dist = {"num_workers": IntDistribution(0, 2)}
    study.add_trial(
        optuna.trial.create_trial(params={"num_workers": 1}, distributions=dist, value=1.0)
    )
    interrupted = optuna.trial.FixedTrial({})
    store.record_outcome(
        interrupted, CONFIG, TrialOutcome("failed", failure=Failure("interrupted", "stopped"))
    )
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs=interrupted.user_attrs
        )
    )
    assert store.is_interrupted(study.trials[1])
    assert study_trials.spent(study, free=4) == 1  # the run resumed measures the rest
    assert study_trials.finished_count(study) == 1
