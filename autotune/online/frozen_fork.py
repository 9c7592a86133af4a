"""Workers forked with what they inherit left out of their garbage collector.

A forked worker shares the training process's memory until it writes to a page. Python's
collector writes to every object it walks, so a full collection in a worker copies the pages of
everything the training process held at the fork (torch's modules, the Dataset, the model).
Measured here on the tutorial's loop, the workers' first epoch took 30-50 thousand more page
faults each than their later ones, and about 0.2 s more CPU each, half of it this.

So a worker this package starts calls ``gc.freeze()`` first thing after the fork (an
``os.register_at_fork`` hook): what it inherited moves where no collection looks, and the
pages stay shared. The freeze is O(1), a list splice. The training process's own collector is
never touched, nor is what another thread forks meanwhile. A worker started by ``spawn`` or
``forkserver`` inherits no heap and is not forked from this process: nothing is done there.

Example:
    >>> with frozen_in_forked_workers():
    ...     iterator = iter(loader)  # its workers forked now
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

# the threads forking workers now; a child's only thread is the one that forked it
_starting: set[int] = set()


def _freeze_if_a_worker() -> None:
    if threading.get_ident() in _starting:
        gc.freeze()
    _starting.clear()  # what the worker itself forks is its own business


os.register_at_fork(after_in_child=_freeze_if_a_worker)


@contextlib.contextmanager
def frozen_in_forked_workers() -> Iterator[None]:
    """Each process this thread forks within the block freezes its heap as it starts."""
    thread = threading.get_ident()
    _starting.add(thread)
    try:
        yield
    finally:
        _starting.discard(thread)
