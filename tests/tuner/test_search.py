"""The search: the as-is way's share of the trials, the polish of each way's best in turn,
repeats that cost nothing, a stop that starts nothing, and hosts sharing one study."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import optuna
import pytest
from helpers import env_with_tests, make_session, start_python

from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.session import Session
from autotune.tuner import storage, store, study_trials
from autotune.tuner.lease import Leases
from autotune.tuner.objective import Objective
from autotune.tuner.search import search
from autotune.tuner.ways import is_as_is


def _leases(session: Session) -> Leases:
    cfg = session.conf.study
    return Leases(cfg.storage, cfg.name, expire_s=storage.lost_after_s(cfg))


def _fake_run(job, *, timeout_s, should_prune=lambda i, v: False):
    """Every config measured at once: the as-is ones slower, more workers faster."""
    config = job.pipeline
    rate = (300.0 if config.as_is else 600.0) + 50.0 * config.num_workers
    m = Measurement(rate, (rate, rate, rate), 0.5, 0.01, 2, 6, epoch_start_s=0.01)
    for index in range(3):
        should_prune(index, rate)
    return TrialOutcome("ok", measurement=m, wall_s=0.0)


@pytest.mark.slow  # a search of its own / a statistical sample: seconds
def test_the_search_spends_its_share_on_the_pipeline_as_it_is_and_polishes_both_ways(
    tmp_path,
) -> None:
    """The real study, TPE and pruner, with more trials than TPE's random start: the as-is
    way gets its share (as-is configs lose to the tuner's decoders on every trial here, so
    TPE alone would starve it), and the polish moves from each way's best in turn."""
    session = make_session(
        [
            "study.n_trials=16",
            "study.n_startup_trials=3",
            f"study.storage=sqlite:///{tmp_path}/s.db",
            "study.name=ways",
            "study.epoch_aware=false",
        ]
    )
    study = storage.open_study(session.conf.study, session.fingerprint)
    search(study, Objective(session, run=_fake_run), threading.Event(), _leases(session))
    trials = study_trials.measured(study.get_trials())  # a repeat took no measurement
    assert len(trials) == 16
    searched = [t for t in trials if store.role_of(t) != store.POLISH]
    assert sum(is_as_is(t.params) for t in searched) >= 0.3 * len(searched) - 1
    polish = [t for t in trials if store.role_of(t) == store.POLISH]
    # intermittent (about one run in four): say which steps and which hosts
    assert len(polish) == 4, [(t.number, t.params, t.user_attrs.get("host")) for t in polish]
    # the whole pipeline twice for each step of the pipeline as it is
    assert [t.user_attrs["polished_as_is"] for t in polish] == [False, False, True, False]
    assert all(is_as_is(t.params) for t in polish if t.user_attrs["polished_as_is"])
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)  # none pruned


def _binding_step_run(job, *, timeout_s, should_prune=lambda i, v: False):
    """As ``_fake_run``, but the step binds: the loader keeps up, data wait 1 %."""
    outcome = _fake_run(job, timeout_s=timeout_s, should_prune=should_prune)
    m = dataclasses.replace(outcome.measurement, data_wait_fraction=0.01)
    return dataclasses.replace(outcome, measurement=m)


@pytest.mark.slow  # a search of its own: seconds
def test_a_step_that_binds_ends_the_search_after_the_random_start_and_a_polish(
    tmp_path,
) -> None:
    session = make_session(
        [
            "study.n_trials=16",
            "study.n_startup_trials=3",
            f"study.storage=sqlite:///{tmp_path}/s.db",
            "study.name=binds",
            "study.epoch_aware=false",
        ]
    )
    study = storage.open_study(session.conf.study, session.fingerprint)
    run = _binding_step_run
    said = search(study, Objective(session, run=run), threading.Event(), _leases(session))
    trials = study_trials.measured(study.get_trials())
    polish = [t for t in trials if store.role_of(t) == store.POLISH]
    # the baseline and the random start (4 > 3), then the polish's 4: not the 16
    assert (len(trials), len(polish)) == (8, 4)
    assert said.startswith("the step binds: the best so far, trial ")
    assert "waits 1% of each step for data (under study.step_bound_wait=5%)" in said
    assert "the search ended after 4 of 16 trials and a polish" in said
    # turned off, the same search spends its whole budget
    off = make_session(
        [
            "study.n_trials=6",
            "study.n_startup_trials=3",
            "study.step_bound_wait=0",
            f"study.storage=sqlite:///{tmp_path}/s.db",
            "study.name=binds-off",
            "study.epoch_aware=false",
        ]
    )
    study = storage.open_study(off.conf.study, off.fingerprint)
    assert search(study, Objective(off, run=run), threading.Event(), _leases(off)) is None
    assert len(study_trials.measured(study.get_trials())) == 6


def test_a_stopped_search_starts_no_trial(tmp_path) -> None:
    session = make_session([f"study.storage=sqlite:///{tmp_path}/s.db", "study.name=stop"])
    study = storage.open_study(session.conf.study, session.fingerprint)
    stop = threading.Event()
    stop.set()
    search(study, Objective(session, run=_fake_run), stop, _leases(session))
    assert study.get_trials() == []


@pytest.mark.slow
def test_three_hosts_share_one_study_on_postgresql_without_losing_or_repeating_a_trial(
    postgres_url,
    tmp_path,
) -> None:
    """Three processes run the same search on one PostgreSQL study at once: the study gets
    its 16 trials between them, no polish step is measured twice, and every host took
    part."""
    host = [str(Path(__file__).with_name("search_host.py")), postgres_url]
    hosts = [start_python(host, tmp_path, env=env_with_tests()) for _ in range(3)]
    for started in hosts:
        _, err = started.communicate(timeout=300)
        assert started.returncode == 0, err[-2000:]
    study = optuna.load_study(study_name="shared", storage=postgres_url)
    everything = study.get_trials()
    trials = study_trials.measured(everything)  # a repeat of a measured config measures nothing
    assert len(trials) == 16
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in everything)
    polish = [t for t in trials if store.role_of(t) == store.POLISH]
    # intermittent (about one run in four): say which steps and which hosts
    assert len(polish) == 4, [(t.number, t.params, t.user_attrs.get("host")) for t in polish]
    polished = [tuple(sorted(t.params.items())) for t in polish]
    assert len(set(polished)) == len(polished)
    assert len({t.user_attrs["host"] for t in trials}) == 3


@pytest.mark.slow  # a search of its own / a statistical sample: seconds
def test_a_config_suggested_again_is_not_measured_again_and_the_search_still_ends(
    tmp_path,
) -> None:
    """A space of 6 configs and a budget of 10: TPE must come back to configs it has
    measured. Each config is measured once; a repeat takes the earlier outcome and is
    followed by an unmeasured neighbour, and the search ends once its free repeats are
    spent."""
    runs: list[str] = []

    def counting_run(job, *, timeout_s, should_prune=lambda i, v: False):
        runs.append(job.pipeline.short())
        return _fake_run(job, timeout_s=timeout_s, should_prune=should_prune)

    session = make_session(
        [
            "study.n_trials=10",
            "study.n_startup_trials=3",
            f"study.storage=sqlite:///{tmp_path}/s.db",
            "study.name=repeats",
            "study.epoch_aware=false",
            "search_space=benchmark_storage",
            "search_space.knobs.num_workers.choices=[0,1]",
            "search_space.knobs.decoder.choices=[as_is,pil,torchvision]",
        ]
    )
    assert len(session.space.grid()) == 6
    study = storage.open_study(session.conf.study, session.fingerprint)
    search(study, Objective(session, run=counting_run), threading.Event(), _leases(session))
    assert sorted(runs) == sorted(set(runs)) and len(runs) == 6  # each config once
    trials = study.get_trials()
    repeats = [t for t in trials if store.is_repeat(t)]
    assert repeats and len(trials) <= 10 + 10  # free repeats: at most the budget's count
    for t in repeats:
        earlier = study.trials[t.user_attrs[store.TrialKey.REPEAT_OF]]
        assert t.user_attrs["config"] == earlier.user_attrs["config"]
        assert t.value == earlier.value
    assert study_trials.finished_count(study) == 6
