"""Warm start: a new study of a job tuned before in the same storage, on a machine of the same
kind, measures the earlier winners first; another job, another kind of machine, or a pick
outside the new space is not carried over. Real Optuna storage and search; the trials'
figures come from a fake run (each config's rate at once)."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

import optuna
import pytest
from helpers import make_session
from optuna.trial import FrozenTrial

from autotune import machine
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.session import Session
from autotune.tuner import storage, store, warm_start
from autotune.tuner.objective import Objective
from autotune.tuner.result import StudyResult
from autotune.tuner.store import StudyKey

# each runs real studies one after another in one storage: seconds each
pytestmark = pytest.mark.slow

FACTS = machine.detect(want_cuda=False)


def _run(job, *, timeout_s, should_prune=lambda i, v: False):
    """The as-is configs slower, more workers faster."""
    config = job.pipeline
    rate = (300.0 if config.as_is else 600.0) + 50.0 * config.num_workers
    m = Measurement(rate, (rate, rate, rate), 0.5, 0.01, 2, 6, epoch_start_s=0.01)
    return TrialOutcome("ok", measurement=m, wall_s=0.0)


def _session(tmp_path, name: str, *more: str, facts: machine.MachineFacts = FACTS) -> Session:
    settings = [
        f"study.storage=sqlite:///{tmp_path}/s.db",
        f"study.name={name}",
        "study.n_trials=6",
        "study.n_startup_trials=2",
        "study.epoch_aware=false",
        *more,
    ]
    return make_session(settings, facts=facts)


def _study(session: Session) -> optuna.Study:
    """Opened as ``tune`` opens it: the baseline queued, warm-started, the job recorded."""
    study = storage.open_study(session.conf.study, session.fingerprint, session.facts)
    baseline = session.space.baseline_params(default_threads=1)
    store.enqueue(study, baseline, {store.TrialKey.ROLE: store.BASELINE})
    if session.conf.study.warm_start:
        warm_start.enqueue_earlier_picks(study, session, baseline)
    store.set_study_attr(study, StudyKey.JOB, session.job_fingerprint)
    return study


def _tuned(session: Session) -> tuple[FrozenTrial, FrozenTrial]:
    """A finished earlier study (the baseline and a trial of each way measured): its winner of
    each way, stored as its confirmation stores them."""
    study = _study(session)
    for params in ({"decoder": "pil", "num_workers": 2}, {"decoder": "as_is", "num_workers": 1}):
        store.enqueue(study, params, {})
    study.optimize(Objective(session, run=_run), n_trials=3)
    winner, as_is = study.get_trials()[1:]
    rows = tuple(
        {
            "label": f"trial {t.number}",
            "trial_number": t.number,
            "config": store.trial_attr(t, store.TrialKey.CONFIG),
            "samples_per_s": t.value,
            "iqr": [t.value, t.value],
        }
        for t in (winner, as_is)
    )
    conf = session.conf.study
    result = StudyResult(conf.name, conf.storage, confirmed=rows, winner_label=rows[0]["label"])
    dataclasses.replace(result, as_is_label=rows[1]["label"]).save(study)
    return winner, as_is


@pytest.fixture(scope="module")
def _first(tmp_path_factory) -> tuple[Path, FrozenTrial, FrozenTrial]:
    folder = tmp_path_factory.mktemp("first")
    return (folder, *_tuned(_session(folder, "first")))


@pytest.fixture
def first(_first, tmp_path) -> tuple[FrozenTrial, FrozenTrial]:
    """The earlier study "first", in a copy of its storage in ``tmp_path``: its winners."""
    folder, winner, as_is = _first
    shutil.copy(folder / "s.db", tmp_path / "s.db")
    return winner, as_is


def test_a_new_study_of_the_job_measures_the_earlier_winners_first(tmp_path, first) -> None:
    winner, as_is = first
    # the same job searched anew: another name, seed and window
    again = _session(tmp_path, "again", "study.seed=7", "window=quick")
    study = _study(again)
    study.optimize(Objective(again, run=_run), n_trials=3)
    first = study.get_trials()
    assert [store.role_of(t) for t in first] == [store.BASELINE, *[store.WARM_START] * 2]
    assert [store.pipeline_of(t) for t in first[1:]] == [
        store.pipeline_of(winner),
        store.pipeline_of(as_is),
    ]
    assert store.trial_attr(first[1], store.TrialKey.WARM_FROM) == (
        f"trial {winner.number} of study 'first'"
    )
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in first)


def test_the_picks_of_several_studies_are_taken_once_each(tmp_path, first) -> None:
    winner, _ = first
    _tuned(_session(tmp_path, "second", "study.warm_start=false"))  # the same two winners
    picks = warm_start.earlier_picks(_session(tmp_path, "third"), "third")
    ways = [("first", "build_loader"), ("first", "loader_kwargs")]
    assert [(p.study, p.way) for p in picks] == ways
    assert picks[0].params == winner.params


def test_another_job_another_kind_of_machine_or_a_cold_start_takes_none(tmp_path, first) -> None:
    other_job = _session(tmp_path, "bigger", "batch_size=64")
    fewer_cpus = dataclasses.replace(FACTS, usable_cpus=FACTS.usable_cpus + 1)
    other_machine = _session(tmp_path, "elsewhere", facts=fewer_cpus)
    cold = _session(tmp_path, "cold", "study.warm_start=false")
    for session in (other_job, other_machine, cold):
        study = _study(session)
        waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
        assert [store.role_of(t) for t in waiting] == [store.BASELINE], session.conf.study.name


def test_a_pick_outside_the_new_space_is_left_out_with_a_line(tmp_path, first, caplog) -> None:
    winner, as_is = first
    workers = sorted({winner.params.get("num_workers", 0), as_is.params.get("num_workers", 0)})
    assert workers[-1] > 0
    # a space without the winners' worker counts
    narrow = [
        "search_space.knobs.num_workers.type=choice",
        "search_space.knobs.num_workers.choices=[0]",
    ]
    with caplog.at_level(logging.INFO, logger="autotune.tuner.warm_start"):
        picks = warm_start.earlier_picks(_session(tmp_path, "narrow", *narrow), "narrow")
    assert all(p.params.get("num_workers", 0) == 0 for p in picks)
    assert "is not a point of this search space: left out" in caplog.text
