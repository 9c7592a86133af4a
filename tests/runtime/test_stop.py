"""Tests for autotune.runtime.stop: Ctrl-C and SIGTERM are one stop request, a second one
forces, and the exit status names the signal; a real SIGTERM to a real study mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import optuna
import psutil
import pytest
from helpers import QUICK, TESTS

from autotune.runtime.stop import exit_status, signals_stop, sigterm_interrupts


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_sets_the_stop_and_a_second_one_forces(signum: int) -> None:
    stop = threading.Event()
    with signals_stop(stop):
        os.kill(os.getpid(), signum)
        assert stop.is_set()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signum)
    assert exit_status() == 128 + signum
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back as it was


def test_outside_a_study_sigterm_interrupts_as_ctrl_c_does() -> None:
    with pytest.raises(KeyboardInterrupt), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
    assert exit_status() == 143


@pytest.mark.slow
def test_sigterm_mid_study_stops_it_as_ctrl_c_leaving_no_process_and_no_running_trial(
    tmp_path,
) -> None:
    """As a scheduler (or `timeout`) stops a job: SIGTERM to the CLI alone, mid-trial."""
    args = [*QUICK, "study.n_trials=6", "study.name=terminated"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    before = []
    for line in proc.stdout:  # the first trial is done: the second is starting or running
        before.append(line)
        if "[ 1/6]" in line:
            break
    running = psutil.Process(proc.pid).children(recursive=True)  # its trial, the workers...
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, "".join(before) + out + err
    assert "SIGTERM: stopping after cleaning up the current trial" in out + err
    _, alive = psutil.wait_procs(running, timeout=10)  # returns as soon as all are gone
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    storage = f"sqlite:///{tmp_path}/studies/autotune.db"
    trials = optuna.load_study(study_name="terminated", storage=storage).trials
    states = [t.state for t in trials]
    assert optuna.trial.TrialState.RUNNING not in states
    assert optuna.trial.TrialState.COMPLETE in states  # what finished is kept
