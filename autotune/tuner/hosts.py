"""What hosts sharing one study do in turn, through leases in its storage: the reference
points once, waiting for the trials still running elsewhere, and one confirmation, whose
best.yaml every host then writes as it is."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.tuner import storage, store, study_trials
from autotune.tuner.lease import Leases
from autotune.tuner.store import StudyKey

log = logging.getLogger(__name__)

REFERENCE_POINTS = "reference points"
POLL_S = 1.0


def confirmation(study: optuna.Study) -> str:
    """The confirmation's lease: one per trial count, so a study resumed with more trials
    is confirmed again, and a finished one is not."""
    return f"confirmation after {study_trials.finished_count(study)} trials"


@contextmanager
def measuring_references(leases: Leases) -> Iterator[bool]:
    """Yields whether this host measures the reference points (no other host is)."""
    if not leases.take(REFERENCE_POINTS):
        log.info("another host measures the ceiling and the CPU-work bound")
        yield False
        return
    try:
        with leases.renewed(REFERENCE_POINTS):
            yield True
    finally:
        leases.release(REFERENCE_POINTS)


def wait_for_trials_elsewhere(study: optuna.Study, stop: threading.Event) -> None:
    """Returns once no trial of the study runs on another host (a dead host's trial is failed
    when its heartbeats stop, or when it never sent one), or on Ctrl-C."""
    announced, silent_since = False, {}
    while not stop.is_set():
        storage.fail_lost(study, silent_since)
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return
        if not announced:
            log.info("waiting for %d trial(s) running on other hosts", len(running))
            announced = True
        time.sleep(POLL_S)


def confirm_once(
    study: optuna.Study,
    leases: Leases,
    stop: threading.Event,
    confirm_here: Callable[[], Path | None],
) -> str:
    """Runs ``confirm_here`` (the confirmation and best.yaml) on whichever host takes the
    confirmation's lease, and publishes that host's best.yaml in the storage; every other
    host waits for it, and takes over if the confirming host dies. Returns where it was
    confirmed: "here", "elsewhere" (``published`` has its best.yaml), or "stopped" (Ctrl-C
    while waiting)."""
    name = confirmation(study)
    announced = False
    while not stop.is_set():
        if leases.take(name):
            try:
                with leases.renewed(name):
                    best = confirm_here()
                if best is not None and not stop.is_set():
                    store.set_study_attr(study, StudyKey.BEST_FILE, best.read_text())
                    leases.finish(name)
            finally:
                leases.release(name)  # stopped or failed: the next run confirms
            return "here"
        if leases.is_done(name):
            return "elsewhere"
        if not announced:
            held = leases.holder_of(name)
            log.info("waiting: %s confirms the finalists", held[0] if held else "another host")
            announced = True
        time.sleep(POLL_S)
    return "stopped"


def published(study: optuna.Study) -> str | None:
    """best.yaml as the confirming host wrote it."""
    return store.study_attr(study, StudyKey.BEST_FILE)
