"""Tests for autotune.online.threads: the process's torch threads, set for each loader's pass
where its setting changed or another live loader set them; a count of the user's left alone."""

from __future__ import annotations

import gc

import pytest
import torch

from autotune.online import threads


class Owner:
    """A loader, as far as the count is concerned."""


@pytest.fixture(autouse=True)
def _threads_as_they_were(monkeypatch):
    monkeypatch.setattr(threads, "_last_set", None)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_loader_whose_setting_changed_sets_its_count() -> None:
    torch.set_num_threads(2)
    threads.apply(Owner(), 1, changed=True)
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


def test_a_count_a_loader_now_gone_set_is_left_alone() -> None:
    torch.set_num_threads(2)
    threads.apply(Owner(), 1, changed=True)  # its loader collected at once
    gc.collect()
    threads.apply(Owner(), 2, changed=False)
    assert torch.get_num_threads() == 1
