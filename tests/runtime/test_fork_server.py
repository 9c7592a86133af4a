"""The trials' fork server: what it preloads, and a command starting it before its imports."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import time

import psutil
import pytest

from autotune.runtime import child, fork_server, trial
from autotune.runtime.job import TrialJob

# prints the fork server's pid (None: not started) after start_for(ARGS), then waits for a line
STARTED = (
    "import sys; from multiprocessing import forkserver; from autotune.runtime import fork_server;"
    " fork_server.start_for(sys.argv[1:], no_trials=('mode=report',));"
    " print(forkserver._forkserver._forkserver_pid, flush=True); sys.stdin.readline()"
)


def test_the_fork_server_preloads_the_childs_code() -> None:
    # the server skips a name it cannot import, silently: each must import
    for name in fork_server.PRELOAD:
        importlib.import_module(name)
    # what the child unpickles and runs comes from modules the server has already
    for thing in (trial._child, TrialJob, child.measure):
        assert thing.__module__ in fork_server.PRELOAD


@pytest.mark.parametrize(
    ("argv", "starts"),
    [([], True), (["batch_size=8"], True), (["--help"], False), (["mode=report"], False)],
)
def test_a_command_starts_the_server_first_unless_it_runs_no_trial(
    argv: list[str], starts: bool
) -> None:
    command = subprocess.Popen(
        [sys.executable, "-c", STARTED, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert command.stdout is not None and command.stdin is not None
    pid = command.stdout.readline().strip()
    try:
        assert (pid != "None") is starts, pid
        if starts:  # importing torch, while the command goes on
            server = psutil.Process(int(pid))
            assert "forkserver" in " ".join(_cmdline(server))
            server.send_signal(signal.SIGKILL)
    finally:
        command.communicate("\n", timeout=60)
    assert command.returncode == 0


def _cmdline(process: psutil.Process, within_s: float = 10.0) -> list[str]:
    """The process's command line, once it has one: a process just started read an empty one
    once in CI (its exec under way)."""
    deadline = time.monotonic() + within_s
    while not (line := process.cmdline()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return line
