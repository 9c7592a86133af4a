"""Ctrl-C, and SIGTERM as schedulers send it (Slurm, Kubernetes, torchrun's agent, `timeout`),
as a stop request: the current trial is taken down cleanly and the study saved."""

from __future__ import annotations

import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_MESSAGE_THREAD = "autotune-stop-message"  # the thread that says a stop was asked for
_received: list[int] = []  # the stop signals sent during the run in progress, in order


def exit_status() -> int:
    """The exit code of a run a signal stopped: 128 + that signal (130 for Ctrl-C, 143 for
    SIGTERM), as a shell reports a process the signal ended."""
    return 128 + (_received[-1] if _received else signal.SIGINT)


def _named(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


@contextmanager
def _handled(handler: Callable[[int, object], None], signals: tuple[int, ...]) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a worker thread's run is not stopped
        return
    _received.clear()  # a new run: an earlier run's stop is not this one's
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises KeyboardInterrupt where Ctrl-C would: outside a study's
    trials (``signals_stop``), a stop ends the run as Ctrl-C does, not in mid-write."""

    def handler(signum: int, frame: object) -> None:
        _received.append(signum)
        raise KeyboardInterrupt

    with _handled(handler, (signal.SIGTERM,)):
        yield


@contextmanager
def signals_stop(stop: threading.Event) -> Iterator[None]:
    """While inside, Ctrl-C or SIGTERM sets ``stop``: the current trial's processes are taken
    down, its trial recorded as interrupted, the study saved. A second one raises
    KeyboardInterrupt.

    Handled here, not as KeyboardInterrupt: one arriving inside Optuna's storage writes could
    leave a trial RUNNING.
    """

    def handler(signum: int, frame: object) -> None:
        _received.append(signum)
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        _say_from_a_thread(
            "%s: stopping after cleaning up the current trial (again to force)", _named(signum)
        )

    with _handled(handler, STOP_SIGNALS):
        yield


def _say_from_a_thread(message: str, *args: object) -> None:
    """Logs ``message`` from a thread, not from the signal handler: the handler runs inside
    whatever the main thread was doing, a write to the log's own stream included (blocked on
    a full pipe, interrupted by the signal), and a write from there is a reentrant call that
    logging drops with a traceback. The thread's write waits for the main thread's to end."""
    say = threading.Thread(
        target=log.warning, args=(message, *args), name=STOP_MESSAGE_THREAD, daemon=True
    )
    say.start()


@contextmanager
def stoppable(run: Callable[..., Any]) -> Iterator[tuple[threading.Event, Callable[..., Any]]]:
    """While inside, Ctrl-C or SIGTERM stops ``run`` (a ``run_trial``): yields the stop event
    and ``run`` bound to it, so the trial in flight is taken down and the caller sees the
    event set."""
    stop = threading.Event()
    with signals_stop(stop):
        yield stop, functools.partial(run, stop=stop)
