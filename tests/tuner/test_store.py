"""The record kept on the study: what a trial and a run store, read back by name."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import IntDistribution

from autotune.errors import UsageError
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.schema import StudyConfig
from autotune.tuner import storage, store
from autotune.tuner.objective import compiled_while_timed
from autotune.tuner.store import TrialKey
from studies import study_with

CONFIG = PipelineConfig(num_workers=2, prefetch_factor=4, decoder="opencv", main_threads=1)


def test_a_trial_records_what_it_measured_and_reads_it_back() -> None:
    trial = optuna.trial.FixedTrial({})
    m = Measurement(400.0, (390.0, 410.0), 0.25, 0.5, 8, 16)
    store.record_outcome(trial, CONFIG, TrialOutcome("ok", m, peak_memory_bytes=2**30))
    attrs = trial.user_attrs
    assert attrs[TrialKey.STEADY] == 400.0 and attrs[TrialKey.SUB_WINDOWS] == [390.0, 410.0]
    assert attrs[TrialKey.PEAK_MEMORY_MB] == 1024.0 and attrs[TrialKey.SPREAD] == 0.05
    frozen = study_with(attrs).trials[0]
    assert store.pipeline_of(frozen) == CONFIG
    assert store.setting_of(frozen, "decoder") == "opencv"
    assert store.setting_of(frozen, "num_workers") == 2  # the record, not the params
    assert TrialKey.TIMED_COMPILES not in attrs  # nothing compiled while timed


def test_graphs_compiled_while_timed_are_on_the_trial_and_its_line() -> None:
    trial = optuna.trial.FixedTrial({})
    m = Measurement(400.0, (400.0,), 0.25, 0.5, 8, 16, timed_compiles=2)
    store.record_outcome(trial, CONFIG, TrialOutcome("ok", m))
    assert trial.user_attrs[TrialKey.TIMED_COMPILES] == 2
    assert compiled_while_timed(2).startswith(" [2 graph(s) compiled while timed")
    assert compiled_while_timed(0) == ""


def test_a_failure_and_a_skip_are_recorded_with_their_reason() -> None:
    failed = optuna.trial.FixedTrial({})
    outcome = TrialOutcome("failed", failure=Failure("worker_died", "killed by signal"))
    store.record_outcome(failed, CONFIG, outcome)
    skipped = optuna.trial.FixedTrial({})
    store.record_skipped(skipped, CONFIG, "would not fit")
    study = study_with(failed.user_attrs, skipped.user_attrs)
    first, second = study.trials
    assert store.has_failure(first) and store.failure_kind(first) == "worker_died"
    assert store.is_skipped(second) and not store.has_failure(second)
    # nothing was measured for the skipped one: its settings come from its params
    assert store.setting_of(second, "decoder") is None
    assert store.setting_of(second, "num_workers") == 1


def test_a_study_resumes_only_with_its_own_fingerprint_and_format(tmp_path) -> None:
    cfg = StudyConfig(name="s", storage=f"sqlite:///{tmp_path}/a.db")
    storage.open_study(cfg, "abc")
    assert storage.open_study(cfg, "abc").user_attrs["format"] == store.STUDY_FORMAT  # resumed
    with pytest.raises(UsageError, match="another dataset, model, recipe, window or search"):
        storage.open_study(cfg, "xyz")
    older = StudyConfig(name="old", storage=cfg.storage)
    made = optuna.create_study(study_name="old", storage=cfg.storage)
    made.set_user_attr("fingerprint", "abc")  # as an older autotune left it: no format
    with pytest.raises(UsageError, match="made by an older autotune"):
        storage.open_study(older, "abc")


def test_a_trial_made_without_asking_keeps_its_record_and_fails_without_a_value() -> None:
    study = optuna.create_study(direction="maximize")
    dist = {"num_workers": IntDistribution(0, 2)}
    attrs = {TrialKey.CONFIG: CONFIG.short()}
    for value in (12.5, None):
        study.add_trial(store.finished_trial({"num_workers": 2}, dist, attrs, value))
    done, failed = study.trials
    assert (done.state, done.value, store.trial_attr(done, TrialKey.CONFIG)) == (
        optuna.trial.TrialState.COMPLETE,
        12.5,
        CONFIG.short(),
    )
    assert failed.state is optuna.trial.TrialState.FAIL and failed.params == {"num_workers": 2}
