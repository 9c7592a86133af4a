"""Workers forked with what they inherited frozen: each worker sees it frozen, and the
training process's collector is as it was, the user's own freeze included, as is what any other
fork of it inherits."""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading

import pytest
from torch.utils.data import Dataset

import autotune
from autotune.online.frozen_fork import frozen_in_forked_workers

FORK = multiprocessing.get_context("fork")  # whatever the platform's default start method


class FreezeCounts(Dataset):
    """Each sample: how many objects the process reading it has frozen."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        return gc.get_freeze_count()


@pytest.fixture
def unfrozen():
    assert gc.get_freeze_count() == 0, "a test before this one left the heap frozen"
    yield
    gc.unfreeze()


def _read(loader) -> list[int]:
    return [count for batch in loader for count in batch.tolist()]


@pytest.mark.parametrize("persistent", [True, False])
def test_forked_workers_inherit_a_frozen_heap_and_the_training_process_keeps_its_own(
    unfrozen, persistent
):
    loader = autotune.DataLoader(
        FreezeCounts(), batch_size=2, num_workers=2, persistent_workers=persistent, tune=False,
        multiprocessing_context=FORK,
    )  # fmt: skip
    for _ in range(2):  # a persistent loader's second epoch forks nothing
        assert min(_read(loader)) > 0
        assert gc.get_freeze_count() == 0


def test_a_heap_the_user_froze_is_left_frozen(unfrozen):
    gc.freeze()
    loader = autotune.DataLoader(
        FreezeCounts(), batch_size=2, num_workers=1, tune=False, multiprocessing_context=FORK
    )
    assert min(_read(loader)) > 0
    assert gc.get_freeze_count() > 0  # not handed back to the collector: the user froze it


def test_without_workers_nothing_is_frozen(unfrozen):
    loader = autotune.DataLoader(FreezeCounts(), batch_size=2, num_workers=0, tune=False)
    assert _read(loader) == [0] * 8


def _forked_freeze_count() -> int:
    """How many objects a process this one forks finds frozen."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running the parent's cleanup
        os.write(write, str(gc.get_freeze_count()).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        count = int(pipe.read())
    os.waitpid(pid, 0)
    return count


def test_a_process_forked_by_anything_else_keeps_its_collector(unfrozen):
    loader = autotune.DataLoader(
        FreezeCounts(), batch_size=2, num_workers=1, tune=False, multiprocessing_context=FORK
    )
    assert min(_read(loader)) > 0
    assert _forked_freeze_count() == 0


def test_a_process_another_thread_forks_while_workers_start_keeps_its_collector(unfrozen):
    with frozen_in_forked_workers():
        others: list[int] = []
        thread = threading.Thread(target=lambda: others.append(_forked_freeze_count()))
        thread.start()
        thread.join()
        assert others == [0]
        assert _forked_freeze_count() > 0  # this thread's, as a worker's
