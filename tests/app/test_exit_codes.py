"""Tests for autotune.app.exit_codes: bad input as one line and 2, a stop as 128 + the signal,
and the fast exit that still runs the exit handlers and flushes what was printed."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from autotune.app.exit_codes import exit_code, exit_now
from autotune.errors import UsageError

FAST_EXIT = """
import atexit
from autotune.app.exit_codes import exit_now
atexit.register(print, "exit handler ran")
print("printed before", end="")  # block-buffered into a pipe: lost unless flushed
exit_now(3)
"""


@pytest.mark.slow  # a fresh process that imports torch
def test_exit_now_keeps_the_code_the_output_and_the_exit_handlers() -> None:
    done = subprocess.run([sys.executable, "-c", FAST_EXIT], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "printed beforeexit handler ran\n"


def test_exit_now_leaves_a_working_thread_to_the_interpreter() -> None:
    release = threading.Event()
    worker = threading.Thread(target=release.wait)  # not a daemon: the interpreter joins it
    worker.start()
    try:
        with pytest.raises(SystemExit) as exited:  # not os._exit: this process goes on
            exit_now(3)
        assert exited.value.code == 3
    finally:
        release.set()
        worker.join()


def test_bad_input_is_one_line_and_code_2(capsys) -> None:
    def body() -> int:
        raise UsageError("batch_size=0 is not positive\nset batch_size=N with N >= 1")

    assert exit_code("prog", body) == 2
    err = capsys.readouterr().err
    assert err == "prog: error: batch_size=0 is not positive; set batch_size=N with N >= 1\n"


def test_sigterm_inside_is_a_stop_with_code_143(capsys) -> None:
    def body() -> int:
        signal.raise_signal(signal.SIGTERM)
        return 0

    assert exit_code("prog", body, interrupted="stopped") == 143
    assert capsys.readouterr().err == "prog: stopped\n"
