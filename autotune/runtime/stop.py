"""Ctrl-C as a stop request: the current trial is taken down cleanly and the study saved."""

from __future__ import annotations

import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)


@contextmanager
def ctrl_c_stops(stop: threading.Event) -> Iterator[None]:
    """While inside, Ctrl-C sets ``stop``: the current trial's processes are taken down, its
    trial recorded as interrupted, the study saved. A second Ctrl-C raises KeyboardInterrupt.

    Handled here, not as KeyboardInterrupt: one arriving inside Optuna's storage writes could
    leave a trial RUNNING.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        log.warning("Ctrl-C: stopping after cleaning up the current trial (again to force)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def stoppable(run: Callable[..., Any]) -> Iterator[tuple[threading.Event, Callable[..., Any]]]:
    """While inside, Ctrl-C stops ``run`` (a ``run_trial``): yields the stop event and ``run``
    bound to it, so the trial in flight is taken down and the caller sees the event set."""
    stop = threading.Event()
    with ctrl_c_stops(stop):
        yield stop, functools.partial(run, stop=stop)
