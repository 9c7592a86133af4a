"""Tests for autotune.online.made_anew: a loop that makes its loader anew each epoch tunes, each
loader going on with what the one before it explored, losing no sample; what one dropped was
measuring is recorded as stopped only where the process ends with it; a loader made while the
one before it lives starts over; what a run says at its start is said once in the process."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import torch
from helpers import BRIEF_WINDOW

import autotune
from autotune.online import made_anew
from autotune.runtime.failures import FailureKind
from autotune.tuner import store


class Paced(torch.utils.data.Dataset):
    """Samples that wait 2 ms each on a read: workers read them faster than the loop alone."""

    def __init__(self, samples: int = 64) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.002)
        return torch.tensor(index)


@pytest.fixture(autouse=True)
def _nothing_said_or_left_yet(monkeypatch):
    monkeypatch.setattr(made_anew, "_said", set())
    monkeypatch.setattr(made_anew, "_explorations", {})
    monkeypatch.setattr(made_anew, "_last_loaders", {})


def _epoch(
    storage: str, tune: float = 3.0, samples: int = 64, workers: int = 0
) -> autotune.DataLoader:
    """One epoch of a loader made for it, as a loop that makes one each epoch reads it."""
    loader = autotune.DataLoader(
        Paced(samples), batch_size=4, shuffle=True, tune=tune, window=BRIEF_WINDOW,
        storage=storage, num_workers=workers,
    )  # fmt: skip
    assert sorted(i for b in loader for i in b.tolist()) == list(range(samples))
    return loader


def _trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    (study,) = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=study, storage=storage).trials


def _proposals_measured(storage: str) -> None:
    """Settings other than the loop's own (no workers) measured whole, by a loader that went
    on (the first measures its own settings); none left measuring nothing."""
    trials = _trials(storage)
    measured = {t.user_attrs["config"] for t in trials if t.state.name == "COMPLETE"}
    assert {c for c in measured if not c.startswith("w0 ")}, measured
    assert not [t for t in trials if store.has_failure(t) and store.is_interrupted(t)]


@pytest.mark.slow  # eight epochs of real loaders, workers started in each: seconds
def test_loaders_made_anew_each_epoch_go_on_with_what_the_one_before_explored(
    tmp_path, caplog
) -> None:
    storage = f"sqlite:///{tmp_path}/a.db"
    explorers = []
    with caplog.at_level(logging.INFO, logger="autotune"):
        for _ in range(8):  # a budget of ten epochs' time: one proposal failing costs one
            # epochs of 32 batches: a proposal's warm-up and a sub-window fit in one with
            # room to spare, on a machine loaded by other tests too (16 did not, once)
            loader = _epoch(storage, tune=10.0, samples=128)
            explorers.append(loader.explorer)
            del loader
    assert caplog.text.count(made_anew.GOES_ON) == 1
    first = explorers[0]
    assert first is not None and explorers[1] is first  # the second loader went on with it
    _proposals_measured(storage)


@pytest.mark.slow  # six epochs of real loaders, eight workers started in each: seconds
def test_a_loader_made_anew_reads_the_first_setting_where_one_epoch_cannot_read_it_whole(
    tmp_path, caplog
) -> None:
    """Your eight workers' first reading (their buffer drained, then two sub-windows) is longer
    than an epoch of 16 batches: the first loader leaves it, and the next reads it in its one
    epoch, cut at its last batch with the one sub-window that fits; the run explores on."""
    storage = f"sqlite:///{tmp_path}/f.db"
    with caplog.at_level(logging.INFO, logger="autotune"):
        explorers = [_epoch(storage, tune=10.0, workers=8).explorer for _ in range(6)]
    assert caplog.text.count(made_anew.GOES_ON) == 1
    first, second = explorers[:2]
    assert first is None and second is not None and second.start_reading is not None
    assert second.start_reading.settings.num_workers == 8  # yours, read by the second loader
    measured = [t.user_attrs["config"] for t in _trials(storage) if t.state.name == "COMPLETE"]
    yours = second.start_reading.settings.short()  # its threads are the process's
    assert [c for c in measured if c != yours], measured  # and a proposal


@pytest.mark.slow  # four epochs of real loaders, fourteen workers started in each: seconds
def test_settings_no_epoch_of_a_loader_made_anew_can_time_are_said_so_once(
    tmp_path, caplog
) -> None:
    storage = f"sqlite:///{tmp_path}/g.db"
    with caplog.at_level(logging.INFO, logger="autotune"):
        for _ in range(4):  # a warm-up and one sub-window of 14 batches: not in 15 of 16
            _epoch(storage, tune=10.0, workers=14)
    assert caplog.text.count("not tuned") == 1
    assert "an epoch of 16 batches" in caplog.text


@pytest.mark.slow  # six loaders of real workers, each read ten batches and dropped: seconds
def test_loaders_made_anew_and_left_after_ten_batches_each_tune(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/h.db"
    for _ in range(6):
        loader = autotune.DataLoader(
            Paced(128), batch_size=4, shuffle=True, tune=10.0, window=BRIEF_WINDOW,
            storage=storage, num_workers=2,
        )  # fmt: skip
        for step, _batch in enumerate(loader):
            if step == 9:
                break
        del loader, _batch
    measured = [t for t in _trials(storage) if t.state.name == "COMPLETE"]
    assert len(measured) >= 2, [t.user_attrs["config"] for t in measured]  # it stalled at one


@pytest.mark.slow  # real loaders, their exploration left and taken up: seconds
def test_what_a_dropped_loader_measured_is_stopped_only_as_the_process_ends(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/b.db"
    _epoch(storage, tune=50.0)  # dropped with much left to explore
    gc.collect()
    (left,) = made_anew._explorations.values()  # left for the job's next loader
    assert not left.explorer.done and not [t for t in _trials(storage) if store.has_failure(t)]
    child = os.fork()
    if child == 0:  # a process forked since (a rank, a worker) never takes it up
        os._exit(0 if made_anew.taken_up(left.record.job, object()) is None else 1)
    assert os.waitpid(child, 0)[1] == 0
    made_anew._ended()  # as the process exits
    trials = _trials(storage)
    assert "RUNNING" not in {t.state.name for t in trials}
    assert store.failure_kind(trials[-1]) is FailureKind.INTERRUPTED
    assert made_anew._explorations == {}


_ENDS_EXPLORING = """
import sys, time, torch, autotune
sys.path.insert(0, {tests!r})
from helpers import BRIEF_WINDOW

class Paced(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        time.sleep(0.002)
        return torch.tensor(index)

loader = autotune.DataLoader(
    Paced(), batch_size=4, tune=1000.0, window=BRIEF_WINDOW, storage={storage!r}
)
for _ in range(2):
    for batch in loader:
        pass
"""


@pytest.mark.slow  # a fresh interpreter, its run ending long before its budget
def test_a_run_that_ends_while_its_loader_explores_records_what_it_measured(tmp_path) -> None:
    """The loader alive as the process exits: what it was measuring is recorded as stopped,
    not left to a next loader that will never come."""
    storage = f"sqlite:///{tmp_path}/e.db"
    script = _ENDS_EXPLORING.format(tests=str(Path(__file__).parents[1]), storage=storage)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    trials = _trials(storage)
    assert "RUNNING" not in {t.state.name for t in trials}
    failed = [store.failure_kind(t) for t in trials if store.has_failure(t)]
    assert failed == [FailureKind.INTERRUPTED]


@pytest.mark.slow  # two loaders of one job alive at once: seconds
def test_a_loader_made_while_the_one_before_lives_starts_over(tmp_path, caplog) -> None:
    storage = f"sqlite:///{tmp_path}/c.db"
    with caplog.at_level(logging.INFO, logger="autotune"):
        before = _epoch(storage, tune=50.0)
        after = _epoch(storage, tune=50.0)
    assert after.explorer is not None and after.explorer is not before.explorer
    assert made_anew.GOES_ON not in caplog.text
    del before
    gc.collect()  # what it measured: no later loader's to go on with
    kinds = {store.failure_kind(t) for t in _trials(storage) if store.has_failure(t)}
    assert FailureKind.ABANDONED in kinds and FailureKind.INTERRUPTED not in kinds


def test_what_a_run_says_at_its_start_is_said_once_in_the_process(caplog) -> None:
    line = "w2 pf2 persist as_is t1 bs4, as kept by an earlier run"
    with caplog.at_level(logging.INFO, logger="autotune"):
        for _ in range(3):
            made_anew.say_once(line, "online-train-1a2b")
        made_anew.say_once(line, "online-val-3c4d")  # another job's loader: its own line
    assert caplog.text.count("as kept by an earlier run") == 2


@pytest.mark.slow  # a real Trainer, its loader made anew each epoch: seconds
def test_lightning_reloading_its_loader_each_epoch_tunes(tmp_path, caplog) -> None:
    """Lightning's ``reload_dataloaders_every_n_epochs=1``: a loader each epoch, each iterated
    twice (a pass begun as the data is set up, then the epoch's), and never asked past its
    last batch (Lightning knows the length): each goes on with what the last explored."""
    import lightning as L
    from lightning_example import IndexModule, quiet_trainer

    storage = f"sqlite:///{tmp_path}/d.db"
    explorers = []

    class Data(L.LightningDataModule):
        def train_dataloader(self) -> autotune.DataLoader:
            loader = autotune.DataLoader(  # 16 batches: w14's epoch times none: failed
                Paced(), batch_size=4, shuffle=True, tune=10.0, window=BRIEF_WINDOW,
                storage=storage,
            )  # fmt: skip
            explorers.append(lambda: loader.explorer)  # read as the epoch ends: weakly held
            return loader

    class Model(IndexModule):
        def on_train_epoch_end(self) -> None:
            explorers[-1] = explorers[-1]()

    trainer = quiet_trainer(max_epochs=4, reload_dataloaders_every_n_epochs=1)
    with caplog.at_level(logging.INFO, logger="autotune"):
        trainer.fit(Model(), Data())
    assert caplog.text.count(made_anew.GOES_ON) == 1
    assert explorers[0] is not None and explorers[1] is explorers[0]
    _proposals_measured(storage)
