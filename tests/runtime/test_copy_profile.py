"""autotune.runtime.copy_profile: the device stage timed on fresh batches, per sample."""

from __future__ import annotations

import pytest
import torch

from autotune.runtime.copy_profile import profile_copy


def batches(size: int):
    index = 0
    while True:
        yield torch.full((size, 3), float(index)), torch.zeros(size, dtype=torch.int64)
        index += 1


def test_each_batch_once_the_warmup_untimed_and_synced_at_the_edges() -> None:
    seen: list[float] = []
    syncs: list[int] = []

    def stage(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(float(batch[0][0, 0]))
        return batch

    timed = profile_copy(
        batches(4), stage, sync=lambda: syncs.append(len(seen)), n_batches=3, warmup=1
    )
    assert seen == [0.0, 1.0, 2.0, 3.0]  # fresh batches, never the same one again
    assert syncs == [0, 1, 1, 2, 2, 3, 3, 4]  # before and after each stage
    assert timed.cpu_s >= 0 and timed.wall_s >= 0


def test_no_batch_to_time_is_an_error() -> None:
    with pytest.raises(ValueError, match="n_batches >= 1"):
        profile_copy(batches(2), lambda images, labels: (images, labels), n_batches=0)
