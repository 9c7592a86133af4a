"""How a trial failed: its kind, read from the exception or the signal that ended it, and
what to do about it.

Example:
    >>> failure = Failure(classify(exc), str(exc))
    >>> failure.kind, failure.hint   # "cuda_oom", "lower batch_size, or ..."
"""

from __future__ import annotations

import os
import signal
import traceback
from dataclasses import dataclass

from autotune.errors import UsageError

HINTS = {
    "cuda_oom": "lower batch_size, or exclude this config with study.memory_budget_gb",
    "host_oom": "lower num_workers x prefetch_factor or batch_size; check free RAM",
    "shm_exhausted": "raise --shm-size (docker) or lower num_workers x prefetch_factor",
    "worker_died": "a DataLoader worker crashed: run the config with num_workers=0 to see why",
    "timeout": "the trial ran past study.trial_timeout: raise it, or the config hangs",
    "rank_died": "a rank of the trial crashed: run the config with ranks=1 to see why",
    "corrupt_data": "remove or fix the unreadable files named in the message",
    "invalid_config": "fix the search space so that it only yields valid settings",
    "host_lost": "the host measuring it stopped sending heartbeats (it died): the study went on",
    "interrupted": "stopped by Ctrl-C: run the same command again to resume the study",
    "error": "see the message; AUTOTUNE_DEBUG=1 logs the trial's traceback",
}


@dataclass(frozen=True)
class Failure:
    kind: str  # a key of HINTS
    message: str

    @property
    def hint(self) -> str:
        return HINTS.get(self.kind, HINTS["error"])

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message, "hint": self.hint}


class RankFailed(Exception):
    """One rank of a trial of several failed, or died: its failure is the trial's."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def describe(exc: BaseException) -> str:
    """An exception raised inside a trial, in one line."""
    if isinstance(exc, RankFailed):
        return str(exc)
    return f"{type(exc).__name__}: {exc}".strip()


def classify(exc: BaseException) -> str:
    """The failure kind of an exception raised inside a trial."""
    if isinstance(exc, RankFailed):
        return exc.failure.kind
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError) or "can't allocate memory" in text:
        return "host_oom"
    if "CUDA out of memory" in text or "OutOfMemoryError" in text:
        return "cuda_oom"
    if "Bus error" in text or "shared memory" in text or "No space left on device" in text:
        return "shm_exhausted"
    if "DataLoader worker" in text and (
        "killed by signal" in text or "exited unexpectedly" in text
    ):
        return "worker_died"
    if isinstance(exc, UsageError):
        return "invalid_config"
    if any(
        marker in text
        for marker in ("cannot identify image", "truncated", "could not decode", "Corrupt JPEG")
    ):
        return "corrupt_data"
    return "error"


def classify_signal(
    signum: int, process: str = "trial process", otherwise: str = "error"
) -> Failure:
    """The failure of a trial process killed by ``signum``; ``process`` names it, and
    ``otherwise`` is the kind where the signal says nothing more (a rank's: ``rank_died``)."""
    name = signal.Signals(signum).name
    if signum == signal.SIGKILL:
        return Failure("host_oom", f"{process} killed by {name} (the kernel's OOM killer?)")
    if signum == signal.SIGBUS:
        return Failure("shm_exhausted", f"{process} killed by {name}")
    return Failure(otherwise, f"{process} killed by {name}")


def reported(exc: BaseException) -> tuple[str, str, str]:
    """What a trial's process says of an exception that ended it: its kind, one line, and
    its traceback where ``AUTOTUNE_DEBUG`` is set (else empty)."""
    detail = traceback.format_exc() if os.environ.get("AUTOTUNE_DEBUG") else ""
    return classify(exc), describe(exc), detail
