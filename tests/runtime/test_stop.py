"""Tests for autotune.runtime.stop: Ctrl-C and SIGTERM are one stop request, a second one
forces, and the exit status names the signal; a real SIGTERM to a real study mid-run."""

from __future__ import annotations

import fcntl
import io
import logging
import os
import signal
import struct
import sys
import termios
import threading

import optuna
import psutil
import pytest
from helpers import QUICK, interrupt_cli
from zygote import Command

from autotune.runtime.stop import (
    STOP_MESSAGE_THREAD,
    exit_status,
    signals_stop,
    sigterm_interrupts,
)


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


def test_a_stop_while_the_log_s_stream_is_blocked_is_still_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGTERM lands while the main thread's write to the log's stream is blocked on a full
    pipe (a slow reader of the CLI's output): said once that write ends, not dropped as a
    reentrant write from inside the signal handler."""
    read_end, write_end = os.pipe()
    stream = open(write_end, "w")  # noqa: SIM115  # closed below, once everything is said
    handler = logging.StreamHandler(stream)
    monkeypatch.setattr(logging.getLogger("autotune.runtime.stop"), "handlers", [handler])
    capacity = fcntl.fcntl(read_end, fcntl.F_GETPIPE_SZ)
    said: list[bytes] = []
    main = threading.main_thread().ident
    assert main is not None

    def signal_once_full_then_read() -> None:
        while _unread(read_end) < capacity:  # the main thread's write fills it, then blocks
            os.sched_yield()
        signal.pthread_kill(main, signal.SIGTERM)  # to the thread in the write
        while chunk := os.read(read_end, 65536):
            said.append(chunk)

    reader = threading.Thread(target=signal_once_full_then_read)
    reader.start()
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stderr", errors)  # where logging reports a write it dropped
    with signals_stop(threading.Event()):
        stream.write("x" * (capacity + 4096))
        stream.flush()
    for thread in threading.enumerate():
        if thread.name == STOP_MESSAGE_THREAD:
            thread.join()
    stream.close()
    reader.join()
    assert "SIGTERM: stopping after cleaning up the current trial" in b"".join(said).decode()
    assert "Logging error" not in errors.getvalue()


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` reads."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


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
    running: list[psutil.Process] = []  # its trial, the trial's workers...

    def note_the_processes(proc: Command) -> None:
        running.extend(psutil.Process(proc.pid).children(recursive=True))

    # the first trial is done: the second is starting or running
    code, before, after = interrupt_cli(
        args, tmp_path, after="[ 1/6]", signum=signal.SIGTERM, before_signal=note_the_processes
    )
    assert code == 143, before + after
    assert "SIGTERM: stopping after cleaning up the current trial" in after
    _, alive = psutil.wait_procs(running, timeout=10)  # returns as soon as all are gone
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    storage = f"sqlite:///{tmp_path}/studies/autotune.db"
    trials = optuna.load_study(study_name="terminated", storage=storage).trials
    states = [t.state for t in trials]
    assert optuna.trial.TrialState.RUNNING not in states
    assert optuna.trial.TrialState.COMPLETE in states  # what finished is kept
