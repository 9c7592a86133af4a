"""What torch's DataLoader raising means to a pass: the loader's own failure (a worker
killed, out of memory, unable to start), which a pass falls back from, or the user's Dataset
raising, which it raises as torch does; and whether torch's iterator moved past the batch."""

from __future__ import annotations


def loader_failure(exc: BaseException, *, workers: bool) -> bool:
    """Whether ``exc`` is the loader's own failure (a worker killed, out of memory, or
    unable to start), not the user's Dataset raising, which torch re-raises with its own type
    as caught in a worker (without workers, an ``OSError`` is the Dataset's own read). A
    worker killed as its batch crosses over closes the connection the batch's shared memory
    is fetched through: an ``OSError`` or an ``EOFError`` as it is read."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    if "in DataLoader worker process" in text:
        return False
    return (workers and isinstance(exc, (OSError, EOFError))) or (
        isinstance(exc, RuntimeError) and "DataLoader worker" in text
    )


def moved_past(exc: BaseException, *, own: bool, workers: bool) -> bool:
    """Whether torch's iterator, raising ``exc``, moved past the batch it was reading: the
    Dataset's own error, any error read without workers (the index was drawn, then the read
    raised) or one a worker answered its batch with; not a worker's death, nor a timeout (the
    batch is still to come)."""
    if timed_out(exc):
        return False
    return not own or not workers or "in DataLoader worker process" in str(exc)


def timed_out(exc: BaseException) -> bool:
    """torch's ``timeout`` passed: the batch is still to come, read again at the next call."""
    return isinstance(exc, RuntimeError) and "DataLoader timed out" in str(exc)
