"""A worker that really dies (SIGKILL) while the main thread runs its own code: torch's loader
raises in that code, from its SIGCHLD handler; the watched loader raises from ``next()``, where
``autotune.DataLoader`` falls back (and hands the batches the worker took with it to the next
loader)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest
import torch
from torch.utils.data import Dataset
from torch.utils.data._utils import signal_handling

from autotune.online.worker_watch import WatchedDataLoader

DIES_AT = 3  # handed to the worker once the loop has sample 1 (2 prefetched): then it dies


class DiesInItsWorker(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        if index == DIES_AT and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return index


def _step_until_dead(iterator, after_s: float = 0.1) -> None:
    """The main thread's own work (a training step) while the worker dies, and ``after_s``
    after: where torch's SIGCHLD handler raises (on a loaded machine, not at once)."""
    worker = psutil.Process(iterator._workers[0].pid)
    deadline = time.monotonic() + 60
    while worker.status() != psutil.STATUS_ZOMBIE:  # not reaped: torch's handler looks
        assert time.monotonic() < deadline, "the worker did not die"
    stepped = time.monotonic() + after_s
    while time.monotonic() < stepped:
        time.sleep(0.001)  # the handler runs between two of these


def _loader(kind: type, timeout: float = 0) -> torch.utils.data.DataLoader:
    return kind(
        DiesInItsWorker(), batch_size=None, num_workers=1, prefetch_factor=2, timeout=timeout
    )


@pytest.fixture
def torch_s_handler() -> Iterator[None]:
    """torch's SIGCHLD handler installed, as in a process whose first loader starts workers
    (in the tests' process, an earlier test may have replaced it); then what was there."""
    before = signal.getsignal(signal.SIGCHLD)
    signal_handling._SIGCHLD_handler_set = False
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, before)
        signal_handling._SIGCHLD_handler_set = False


def test_torch_s_loader_raises_a_worker_s_death_in_the_main_thread_s_own_code(
    torch_s_handler,
) -> None:
    iterator = iter(_loader(torch.utils.data.DataLoader))
    assert [next(iterator), next(iterator)] == [0, 1]
    try:
        with pytest.raises(RuntimeError, match="DataLoader worker .* is killed by signal"):
            _step_until_dead(iterator, after_s=30)
    finally:  # a handler left to raise later would raise in pytest's report of this test
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    del iterator


@pytest.mark.parametrize("timeout", [0, 120])
def test_the_watched_loader_raises_it_from_next(torch_s_handler, timeout) -> None:
    """Where the loader has a timeout of its own, long before it ends."""
    started = time.monotonic()
    iterator = iter(_loader(WatchedDataLoader, timeout=timeout))
    got = [next(iterator), next(iterator)]
    _step_until_dead(iterator)  # nothing raised in the step
    with pytest.raises(RuntimeError, match="DataLoader worker .* exited unexpectedly"):
        while True:
            got.append(next(iterator))
    # in order, up to what the worker had sent before it died
    assert got == list(range(len(got))) and len(got) <= DIES_AT
    assert time.monotonic() - started < 60
