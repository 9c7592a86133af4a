"""Tests for autotune.online.dataset_state, and the loader on a Dataset its loop changes
between epochs: workers kept alive would read a stale copy of it, so where the user asked for
workers that do not persist, none are kept alive; where they asked for ones that do, it reads
as torch's."""

from __future__ import annotations

import logging

import pytest
import torch
from helpers import BRIEF_WINDOW
from torch.utils.data import ConcatDataset, Dataset, Subset

import autotune
from autotune.online.dataset_state import attributes, changed
from autotune.pipeline.config import AS_IS, PipelineConfig

N = 24


class Staged(Dataset):
    """Each sample is ``(index, the stage it was read in)``: the stage the loop sets."""

    def __init__(self) -> None:
        self.stage = 0
        self.items = list(range(N))

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> tuple[int, int]:
        return index, self.stage


def test_an_attribute_set_again_is_a_change_and_one_changed_in_place_is_not() -> None:
    data = Staged()
    before = attributes(data)
    data.items.append(N)  # in place: the same list
    assert changed(before, attributes(data)) == []
    data.stage = 1
    data.added = True
    assert changed(before, attributes(data)) == ["added", "stage"]


def test_a_wrapped_dataset_s_attributes_are_watched_too() -> None:
    inner = Staged()
    wrapped = ConcatDataset([Subset(inner, range(4)), Staged()])
    before = attributes(wrapped)
    inner.stage = 3
    assert changed(before, attributes(wrapped)) == ["datasets[0].dataset.stage"]


def _stages(loader: torch.utils.data.DataLoader, epochs: int) -> list[set[int]]:
    """The stages each epoch read, the loop setting the epoch's before it."""
    read = []
    for epoch in range(epochs):
        loader.dataset.stage = epoch  # type: ignore[attr-defined]
        read.append({int(s) for _, stages in loader for s in stages})
    return read


@pytest.mark.slow  # real workers, started each epoch: seconds
def test_where_the_user_s_workers_do_not_persist_none_are_kept_alive(tmp_path, caplog) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    loader = autotune.DataLoader(
        Staged(), batch_size=2, num_workers=2, tune=1000.0, window=BRIEF_WINDOW, storage=storage
    )
    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        assert _stages(loader, 8) == [{epoch} for epoch in range(8)]  # each its own stage
    assert "the loop changes its Dataset between epochs (stage)" in caplog.text
    assert loader.explorer is not None and not loader.settings.persistent_workers
    # from the change on (seen as the second epoch starts), none proposed keeps them alive
    later = [s.settings for s in loader.switches if s.epoch >= 2]
    assert later and not any(settings.persistent_workers for settings in later)


def test_a_switch_to_workers_that_persist_reads_the_stage_the_loop_set() -> None:
    loader = autotune.DataLoader(Staged(), batch_size=4, num_workers=1, tune=False)
    loader.switch(PipelineConfig(decoder=AS_IS, num_workers=1, persistent_workers=True))
    assert _stages(loader, 3) == [{0}, {1}, {2}]
    assert not loader.settings.persistent_workers  # their twin that does not persist
    loader.release()


def test_a_loop_that_leaves_its_epochs_early_is_seen_changing_the_dataset_too() -> None:
    loader = autotune.DataLoader(Staged(), batch_size=2, num_workers=1, tune=False)
    loader.switch(PipelineConfig(decoder=AS_IS, num_workers=1, persistent_workers=True))
    read = []
    for epoch in range(3):  # as Lightning's limit_train_batches leaves them
        loader.dataset.stage = epoch
        first_three = zip(range(3), loader, strict=False)
        read.append({int(s) for _, (_, stages) in first_three for s in stages})
    assert read == [{0}, {1}, {2}]
    loader.release()


def test_where_the_user_asked_for_workers_that_persist_it_reads_as_torch_s() -> None:
    def stages(cls: type) -> list[set[int]]:
        loader = cls(Staged(), batch_size=4, num_workers=1, persistent_workers=True)
        read = _stages(loader, 3)
        del loader
        return read

    assert stages(torch.utils.data.DataLoader) == [{0}, {0}, {0}]  # a copy kept from the start
    assert stages(lambda *a, **k: autotune.DataLoader(*a, tune=False, **k)) == [{0}, {0}, {0}]
