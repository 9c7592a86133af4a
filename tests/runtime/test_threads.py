"""autotune.runtime.threads: torch's and OpenCV's thread counts set inside, restored after."""

from __future__ import annotations

import cv2
import pytest
import torch

from autotune.runtime.threads import threads


@pytest.fixture(autouse=True)
def _restore():
    before = torch.get_num_threads(), cv2.getNumThreads()
    yield
    torch.set_num_threads(before[0])
    cv2.setNumThreads(before[1])


def test_one_thread_inside_and_the_old_counts_after() -> None:
    torch.set_num_threads(2)
    cv2.setNumThreads(3)
    with threads(1):
        assert torch.get_num_threads() == 1
        assert cv2.getNumThreads() == 1  # its own pool off (set to 0), as in the workers
    assert (torch.get_num_threads(), cv2.getNumThreads()) == (2, 3)


def test_restored_when_the_block_raises() -> None:
    torch.set_num_threads(2)
    with pytest.raises(RuntimeError), threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2


def test_n_threads_for_both() -> None:
    with threads(2):
        assert (torch.get_num_threads(), cv2.getNumThreads()) == (2, 2)


def test_none_leaves_the_counts_as_they_are() -> None:
    torch.set_num_threads(2)
    with threads(None):
        assert torch.get_num_threads() == 2
