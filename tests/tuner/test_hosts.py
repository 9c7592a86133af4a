"""What hosts sharing a study do in turn: waiting for the trials running elsewhere ends,
whether their hosts are alive (the trials end) or dead (the trials are failed as lost), on a
real SQLite storage with Optuna's heartbeats."""

from __future__ import annotations

import threading
import time

import optuna
import pytest
from optuna.storages._heartbeat import get_heartbeat_thread
from optuna.trial import TrialState

from autotune.tuner import hosts

HEARTBEAT_S = 1
# a beating trial is stale past the grace period only when its beats are late: two intervals
# of slack, as the tool's own (``storage.lost_after_s``), for a beat a loaded machine delays
GRACE_S = 3 * HEARTBEAT_S
# the tests ask for trials themselves, where Optuna expects its optimize loop
pytestmark = [
    pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning"),
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
]


@pytest.fixture
def study(tmp_path) -> optuna.Study:
    storage = optuna.storages.RDBStorage(
        f"sqlite:///{tmp_path}/shared.db", heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S
    )
    return optuna.create_study(storage=storage, study_name="shared")


def _wait(study: optuna.Study, limit_s: float = 30) -> float:
    """Seconds ``wait_for_trials_elsewhere`` took; it fails the test past ``limit_s``."""
    stop = threading.Event()
    timer = threading.Timer(limit_s, stop.set)
    timer.start()
    started = time.monotonic()
    hosts.wait_for_trials_elsewhere(study, stop)
    timer.cancel()
    assert not stop.is_set(), f"still waiting after {limit_s} s"
    return time.monotonic() - started


def test_a_trial_whose_host_died_before_its_first_heartbeat_is_failed_as_lost(study):
    silent = study.ask()  # RUNNING, and no heartbeat: its host died at once
    _wait(study)
    (trial,) = study.get_trials()
    assert trial.number == silent.number and trial.state == TrialState.FAIL
    assert trial.user_attrs["failure"]["kind"] == "host_lost"
    assert "never sent a heartbeat" in trial.user_attrs["failure"]["message"]


@pytest.mark.slow  # the beating trial outlives the grace period: 4 s
def test_a_trial_whose_heartbeats_stopped_is_failed_and_a_beating_one_is_waited_for(study):
    stopped = study.ask()
    study._storage.record_heartbeat(stopped._trial_id)  # one beat, then its host died
    beating = study.ask()
    with get_heartbeat_thread(beating._trial_id, study._storage):
        threading.Timer(GRACE_S + HEARTBEAT_S, study.tell, (beating, 1.0)).start()  # it ends
        waited = _wait(study)
    assert waited >= GRACE_S + HEARTBEAT_S  # its host beat all along, past the grace period
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {stopped.number: TrialState.FAIL, beating.number: TrialState.COMPLETE}
