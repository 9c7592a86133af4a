"""A loop that makes its loader anew (each epoch, say, as curriculum scripts do): each
``autotune.DataLoader`` starts over, and one dropped while it explored never tunes. What is
said at a run's start is said once in the process; a loader collected while it explored,
the process not exiting, was dropped by the loop: said once, and the setting it measured
recorded as abandoned, not as stopped (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import logging
import multiprocessing.util

from autotune.online import record
from autotune.online.explorer import Explorer

log = logging.getLogger("autotune.online.loader")
DROPPED = (
    "a loader was collected while it explored, the loop reading on (one made anew each "
    "epoch?): each new one starts over and none tunes; make the loader once, before your "
    "epoch loop"
)
_said: set[str] = set()


def say_once(line: str, about: str = "") -> None:
    """Logs ``line`` the first time in the process (``about``: a job's, the first time for
    that job: two loaders of two jobs each say theirs)."""
    if (key := f"{about}: {line}") not in _said:
        _said.add(key)
        log.info("autotune.DataLoader: %s", line)


def closed(explorer: Explorer) -> None:
    """The loader collected, or the process exiting (Ctrl-C; a rank's too): the setting
    asked or measured failed, with why."""
    # set as multiprocessing runs the finalizers of a process that exits (its atexit; a
    # process it started, which ends without atexit), before it runs this one
    exiting = multiprocessing.util._exiting  # type: ignore[attr-defined]
    if not exiting and not explorer.done:
        say_once(DROPPED)
    explorer.close(record.STOPPED if exiting else record.ABANDONED)
