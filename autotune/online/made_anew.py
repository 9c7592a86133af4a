"""A loop that makes its loader anew (each epoch, say, as curriculum scripts do, or Lightning's
``reload_dataloaders_every_n_epochs``): what one loader explored, the next loader of the
same job goes on with, in the same process.

A loader collected while it explored, the process reading on, leaves its explorer here, the
setting it was measuring still running; the job's next loader takes it up as its first epoch
starts, and measures that setting afresh: the study is one run's, however many loaders read
it. One dropped before its first setting was read (nothing explored yet: an epoch too short
for the first reading's warm-up and sub-windows) leaves that to the next, which reads it as
a proposal is read, in its one epoch. One the process ends with (a run that ends, Ctrl-C,
SIGTERM) is recorded as stopped, as a loader's that lives to the end is. Where several ranks
decide together, rank 0's loader goes on so (only it explores), and every rank's new loader
starts where rank 0's does; what each rank read of its loader's last pass is told to rank 0
at that pass's last batch, before the loop drops it. What is said at a run's start is said
once in the process.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing.util
import os
import weakref
from dataclasses import dataclass
from typing import Any

from autotune.online import record
from autotune.online.explorer import Explorer
from autotune.online.job_record import Job, JobRecord
from autotune.online.passes import Passes

log = logging.getLogger("autotune.online.loader")
GOES_ON = (
    "the loop made its loader anew (one each epoch?): it goes on with what the loader "
    "before it explored"
)
_said: set[str] = set()


@dataclass
class _Exploring:
    """A job's exploration in this process, its record, and the loader exploring with it."""

    explorer: Explorer
    record: JobRecord
    loader: weakref.ref[Any]  # dead: dropped by the loop, left for the job's next loader
    pid: int  # a process forked since (a rank, a worker) inherits this and never reads it


_explorations: dict[Job, _Exploring] = {}  # by the job: its storage, study, fingerprint
# by the job: its last loader here, and how the loop read it
_last_loaders: dict[Job, tuple[weakref.ref[Any], Passes, int]] = {}
_closes_at_exit: int | None = None  # the process whose exit closes what was left (``_ended``)


def say_once(line: str, about: str = "") -> None:
    """Logs ``line`` the first time in the process (``about``: a job's, the first time for
    that job: two loaders of two jobs each say theirs)."""
    if (key := f"{about}: {line}") not in _said:
        _said.add(key)
        log.info("autotune.DataLoader: %s", line)


def explores(record: JobRecord, loader: Any, explorer: Explorer) -> None:
    """``loader`` explores the job ``record`` records with ``explorer``: closed as the process
    ends, and, as the loader is collected before, left for the job's next loader (with several
    ranks, rank 0's: only it explores)."""
    global _closes_at_exit
    if _closes_at_exit != os.getpid():  # what the loops dropped, closed as it ends
        multiprocessing.util.Finalize(None, _ended, exitpriority=0)
        _closes_at_exit = os.getpid()
    _explorations[record.job] = _Exploring(explorer, record, weakref.ref(loader), os.getpid())
    close = functools.partial(closed, record.job, explorer, weakref.ref(loader))
    multiprocessing.util.Finalize(loader, close, exitpriority=0)


def taken_up(job: Job, loader: Any) -> tuple[Explorer, JobRecord] | None:
    """The explorer, and the record, a loader of ``job`` the loop dropped left, for ``loader``
    to go on with; None where none was left (or it is done: the setting it kept is recorded)."""
    left = _explorations.get(job)
    if left is None or left.pid != os.getpid() or left.loader() is not None:
        return None
    if left.explorer.done:
        del _explorations[job]
        return None
    left.loader = weakref.ref(loader)
    return left.explorer, left.record


def dropped_before(job: Job, loader: Any) -> bool:
    """``loader`` of ``job`` starts; True where the job's loader before it here was dropped by
    the loop first: this one is made anew, read as that one was (``Passes.follows``), and
    each epoch may be its last."""
    before = _last_loaders.get(job)
    _last_loaders[job] = (weakref.ref(loader), loader.passes, os.getpid())
    if before is None or before[2] != os.getpid() or before[0]() is not None:
        return False  # the first, one of a process forked since, or one beside it
    loader.passes.follows(before[1], loader.epoch_length)
    say_once(GOES_ON, job.name)
    return True


def closed(job: Job, explorer: Explorer, own: weakref.ref[Any]) -> None:
    """The loader ``own`` exploring ``job`` with ``explorer`` was collected, or the process
    exits: the setting asked or measured is left for the job's next loader, or failed, with
    why (one another loader of the job explored beside: abandoned)."""
    # set as multiprocessing runs the finalizers of a process that exits (its atexit; a
    # process it started, which ends without atexit), before it runs this one
    exiting = multiprocessing.util._exiting  # type: ignore[attr-defined]
    left = _explorations.get(job)
    if left is not None and left.explorer is explorer:
        if left.loader() not in (None, own()) or not (exiting or explorer.done):
            return  # taken up by another loader, alive; or left for the next
        del _explorations[job]
    explorer.close(record.STOPPED if exiting else record.ABANDONED)


def _ended() -> None:
    """The process ends: what the loops dropped and no loader took up, stopped."""
    for job, left in list(_explorations.items()):
        if left.pid == os.getpid() and left.loader() is None:
            del _explorations[job]
            left.explorer.close(record.STOPPED)
