"""What torch's DataLoader raising means to a pass: the loader's own failure or the Dataset's."""

from __future__ import annotations

import pytest

from autotune.online import torch_raised


@pytest.mark.parametrize(
    ("exc", "workers", "own"),
    [
        (RuntimeError("DataLoader worker (pid 7) is killed by signal: Killed."), True, True),
        (ConnectionResetError(104, "Connection reset by peer"), True, True),
        (EOFError(), True, True),  # killed as its batch's shared memory was fetched
        (EOFError(), False, False),  # no workers: the Dataset's own
        (OSError("No such file"), False, False),
        (EOFError("Caught EOFError in DataLoader worker process 0."), True, False),
        (MemoryError(), False, True),
    ],
)
def test_a_worker_s_death_is_told_from_the_dataset_s_own_error(exc, workers, own) -> None:
    """What falls back to the last good settings (the loader's own failure) and what is
    raised as torch raises it (the Dataset's): a worker killed as its batch crosses over is
    read as a connection reset or closed, whatever torch's machinery raised."""
    assert torch_raised.loader_failure(exc, workers=workers) is own
