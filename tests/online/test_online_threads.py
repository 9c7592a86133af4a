"""Tests for autotune.online.threads: the process's torch threads, set for each loader's pass
where its setting changed or another live loader set them; a count of the user's left alone."""

from __future__ import annotations

import gc
import multiprocessing

import pytest
import torch

from autotune.online import threads


class Owner:
    """A loader, as far as the count is concerned."""


@pytest.fixture(autouse=True)
def _threads_as_they_were(monkeypatch):
    monkeypatch.setattr(threads, "_last_set", None)
    monkeypatch.setattr(threads, "_yours", None)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_loader_whose_setting_changed_sets_its_count() -> None:
    torch.set_num_threads(2)
    loader = Owner()
    threads.apply(loader, 1, changed=True)
    assert torch.get_num_threads() == 1


def test_a_count_another_live_loader_set_is_replaced_and_yours_is_not() -> None:
    train, val = Owner(), Owner()
    torch.set_num_threads(2)
    threads.apply(train, 1, changed=True)
    threads.apply(val, 2, changed=False)  # its own, never switched: train's count replaced
    assert torch.get_num_threads() == 2
    torch.set_num_threads(3)  # yours, since
    threads.apply(train, 1, changed=False)
    assert torch.get_num_threads() == 3


def test_a_loader_collected_puts_back_the_count_it_found_where_its_own_is_in_place() -> None:
    torch.set_num_threads(2)
    threads.apply(Owner(), 1, changed=True)  # its loader collected at once
    gc.collect()
    assert torch.get_num_threads() == 2
    train = Owner()
    threads.apply(train, 1, changed=True)
    torch.set_num_threads(3)  # yours, since: left as it is
    del train
    gc.collect()
    assert torch.get_num_threads() == 3


def test_your_count_is_the_one_before_loaders_set_theirs() -> None:
    torch.set_num_threads(2)
    first, second = Owner(), Owner()
    threads.apply(first, 1, changed=True)
    threads.apply(second, 3, changed=True)
    assert torch.get_num_threads() == 3 and threads.yours() == 2  # a loader made now: yours
    del second  # the last to set one
    gc.collect()
    assert torch.get_num_threads() == threads.yours() == 2
    torch.set_num_threads(4)
    assert threads.yours() == 4


_held: list[Owner] = []


def _collect_in_the_fork(sent) -> None:
    """A process forked after a loader set the count (a DataLoader worker, a rank): its copy
    of the loader collected there."""
    yours = threads.yours()  # the fork's count: the loader that set it is not its own
    _held.clear()
    gc.collect()
    sent.send((yours, torch.get_num_threads()))


def test_a_loader_collected_in_a_process_forked_since_leaves_that_process_s_count() -> None:
    """The fork's count is its own (torch's workers, and ranks, run on one thread): read as
    yours there, or set there, OpenMP's threads can hang it."""
    torch.set_num_threads(2)
    _held.append(Owner())
    threads.apply(_held[0], 1, changed=True)
    context = multiprocessing.get_context("fork")
    here, there = context.Pipe()
    child = context.Process(target=_collect_in_the_fork, args=(there,))
    child.start()
    try:
        assert here.poll(30) and here.recv() == (1, 1)
    finally:
        child.join(30)
        _held.clear()
