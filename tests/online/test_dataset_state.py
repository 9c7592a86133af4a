"""Tests for autotune.online.dataset_state, and the loader on a Dataset its loop changes
between epochs: workers kept alive would read a stale copy of it, so where the user asked for
workers that do not persist, none are kept alive; where they asked for ones that do, it reads
as torch's."""

from __future__ import annotations

import logging
from pathlib import Path

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


class OpensAtFirstRead(Dataset):
    """Opens what it reads at its first read, in the process that reads it (the pattern of
    h5py and LMDB files: each worker opens its own): it sets this on itself as it reads."""

    def __init__(self) -> None:
        self.lines: list[str] | None = None

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> int:
        if self.lines is None:
            self.lines = Path(__file__).read_text().splitlines()
        return index


def _as_lightning_reads(loader: torch.utils.data.DataLoader) -> list[int]:
    """One epoch, read as Lightning reads a loader whose length it knows: its batches, and
    no request after the last (no StopIteration)."""
    batches = iter(loader)
    return [int(i) for _ in range(len(loader)) for i in next(batches)]


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


def test_what_a_dataset_sets_on_itself_as_it_reads_is_not_a_change_where_none_is_asked_after(
    caplog,
) -> None:
    """Read in the training process (no workers), the Dataset opens its file in the first
    epoch; a loop that asks for no batch after the last (Lightning) ends its epoch there all
    the same: what the Dataset set on itself is not the loop changing it."""
    loader = autotune.DataLoader(OpensAtFirstRead(), batch_size=4, tune=False)
    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        epochs = [sorted(_as_lightning_reads(loader)) for _ in range(3)]
    assert epochs == [list(range(N))] * 3
    assert "the loop changes its Dataset" not in caplog.text


def test_a_loop_that_asks_no_batch_past_the_last_is_seen_changing_the_dataset() -> None:
    loader = autotune.DataLoader(Staged(), batch_size=4, num_workers=1, tune=False)
    loader.switch(PipelineConfig(decoder=AS_IS, num_workers=1, persistent_workers=True))
    read = []
    for epoch in range(3):
        loader.dataset.stage = epoch
        batches = iter(loader)
        read.append({int(s) for _ in range(len(loader)) for s in next(batches)[1]})
    assert read == [{0}, {1}, {2}]
    assert not loader.settings.persistent_workers  # their twin that does not persist
    loader.release()


@pytest.mark.slow  # a real Trainer: seconds
def test_under_lightning_a_dataset_that_opens_its_file_as_it_reads_may_keep_its_workers(
    tmp_path, caplog
) -> None:
    """A real ``Trainer`` over your own settings (no workers): workers that persist are
    measured and may be kept, as in a plain loop. Before, each epoch's start was compared
    with the last one's, and the file opened in the first read as your loop's change."""
    from lightning_example import IndexModule, quiet_trainer

    loader = autotune.DataLoader(
        OpensAtFirstRead(), batch_size=4, tune=10.0, window=BRIEF_WINDOW,
        storage=f"sqlite:///{tmp_path}/autotune.db",
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        quiet_trainer(max_epochs=4).fit(IndexModule(), train_dataloaders=loader)
    assert "the loop changes its Dataset" not in caplog.text
    assert any(r.settings.persistent_workers for r in loader.readings[1:])
    loader.release()
