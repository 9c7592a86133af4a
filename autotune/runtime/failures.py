"""How a trial failed: its kind, read from the exception or the signal that ended it, and
what to do about it.

Example:
    >>> failure = Failure(classify(exc), str(exc))
    >>> failure.kind, failure.hint   # FailureKind.CUDA_OOM, "lower batch_size, or ..."
"""

from __future__ import annotations

import enum
import os
import signal
import traceback
from dataclasses import dataclass

from autotune.errors import UsageError


class FailureKind(str, enum.Enum):
    """How a trial failed (stored as its value); ``hint`` says what to do about it."""

    CUDA_OOM = "cuda_oom"
    HOST_OOM = "host_oom"
    SHM_EXHAUSTED = "shm_exhausted"
    WORKER_DIED = "worker_died"
    TIMEOUT = "timeout"
    RANK_DIED = "rank_died"
    CORRUPT_DATA = "corrupt_data"
    INVALID_CONFIG = "invalid_config"
    UNTIMEABLE = "untimeable"
    OVER_BUDGET = "over_budget"
    HOST_LOST = "host_lost"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"
    ERROR = "error"

    __str__ = str.__str__  # "cuda_oom" in messages and tables, not "FailureKind.CUDA_OOM"
    __format__ = str.__format__

    @classmethod
    def of(cls, value: str) -> FailureKind:
        """The kind a stored value names; one this version does not know is an error."""
        try:
            return cls(value)
        except ValueError:
            return cls.ERROR

    @property
    def hint(self) -> str:
        return _HINTS[self]


_HINTS = {
    FailureKind.CUDA_OOM: "lower batch_size, or exclude this config with study.memory_budget_gb",
    FailureKind.HOST_OOM: "lower num_workers x prefetch_factor or batch_size; check free RAM",
    FailureKind.SHM_EXHAUSTED: "raise --shm-size (docker) or lower num_workers x prefetch_factor",
    FailureKind.WORKER_DIED: "a DataLoader worker crashed: run the config with num_workers=0 "
    "to see why",
    FailureKind.TIMEOUT: "the trial ran past study.trial_timeout: raise it, or the config hangs",
    FailureKind.RANK_DIED: "a rank of the trial crashed: run the config with ranks=1 to see why",
    FailureKind.CORRUPT_DATA: "remove or fix the unreadable files named in the message",
    FailureKind.INVALID_CONFIG: "fix the search space so that it only yields valid settings",
    FailureKind.UNTIMEABLE: "the run's epochs are shorter than the setting's warm-up and one "
    "timing: longer epochs (more data, smaller batches) let it be measured",
    FailureKind.OVER_BUDGET: "its workers start slowly (spawn, forkserver): it is measured once "
    "exploring's budget has grown to pay for their start; a larger tune= pays sooner",
    FailureKind.HOST_LOST: "the host measuring it stopped sending heartbeats (it died): the "
    "study went on",
    FailureKind.INTERRUPTED: "stopped (Ctrl-C, SIGTERM): run the same command again to resume",
    FailureKind.ABANDONED: "the loop dropped its loader while it measured this, and no later "
    "loader went on with it (one of the job's explored beside it): make the loader once, "
    "before the epoch loop",
    FailureKind.ERROR: "see the message; AUTOTUNE_DEBUG=1 logs the trial's traceback",
}


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FailureKind.of(self.kind))  # a child's plain string

    @property
    def hint(self) -> str:
        return self.kind.hint

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message, "hint": self.hint}


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


def first_line(exc: BaseException) -> str:
    """An exception's message's first line, or its type's name where it has none."""
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def classify(exc: BaseException) -> FailureKind:
    """The failure kind of an exception raised inside a trial."""
    if isinstance(exc, RankFailed):
        return exc.failure.kind
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError) or "can't allocate memory" in text:
        return FailureKind.HOST_OOM
    if "CUDA out of memory" in text or "OutOfMemoryError" in text:
        return FailureKind.CUDA_OOM
    if "Bus error" in text or "shared memory" in text or "No space left on device" in text:
        return FailureKind.SHM_EXHAUSTED
    if "DataLoader worker" in text and (
        "killed by signal" in text or "exited unexpectedly" in text
    ):
        return FailureKind.WORKER_DIED
    if isinstance(exc, UsageError):
        return FailureKind.INVALID_CONFIG
    if any(
        marker in text
        for marker in ("cannot identify image", "truncated", "could not decode", "Corrupt JPEG")
    ):
        return FailureKind.CORRUPT_DATA
    return FailureKind.ERROR


def classify_signal(
    signum: int, process: str = "trial process", otherwise: FailureKind = FailureKind.ERROR
) -> Failure:
    """The failure of a trial process killed by ``signum``; ``process`` names it, and
    ``otherwise`` is the kind where the signal says nothing more (a rank's: ``RANK_DIED``)."""
    name = signal.Signals(signum).name
    if signum == signal.SIGKILL:
        return Failure(
            FailureKind.HOST_OOM, f"{process} killed by {name} (the kernel's OOM killer?)"
        )
    if signum == signal.SIGBUS:
        return Failure(FailureKind.SHM_EXHAUSTED, f"{process} killed by {name}")
    return Failure(otherwise, f"{process} killed by {name}")


def reported(exc: BaseException) -> tuple[FailureKind, str, str]:
    """What a trial's process says of an exception that ended it: its kind, one line, and
    its traceback where ``AUTOTUNE_DEBUG`` is set (else empty)."""
    detail = traceback.format_exc() if os.environ.get("AUTOTUNE_DEBUG") else ""
    return classify(exc), describe(exc), detail
