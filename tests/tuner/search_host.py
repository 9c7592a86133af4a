"""One host of a shared study, run by ``test_search`` as its own process (forked from the
tests' zygote, as the other hosts are, so that they start together): the search of that
module's fake trials on the study at the storage URL given."""

from __future__ import annotations

import sys
import threading
import time

from helpers import make_session
from test_search import _fake_run, _leases

from autotune.tuner import storage
from autotune.tuner.objective import Objective
from autotune.tuner.search import search


def _slow_fake_run(job, *, timeout_s, should_prune=lambda i, v: False):
    time.sleep(0.2)  # long enough that the hosts' trials overlap
    return _fake_run(job, timeout_s=timeout_s, should_prune=should_prune)


def main(url: str) -> None:
    session = make_session(
        [
            "study.n_trials=16",
            "study.n_startup_trials=3",
            f"study.storage={url}",
            "study.name=shared",
            "study.epoch_aware=false",
        ]
    )
    study = storage.open_study(session.conf.study, session.fingerprint, session.facts)
    search(study, Objective(session, run=_slow_fake_run), threading.Event(), _leases(session))


if __name__ == "__main__":
    main(sys.argv[1])
