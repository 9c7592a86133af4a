"""Tests for autotune.online.made_anew: a loop that makes its loader anew each epoch is told
once why none tunes, and the settings its loaders measured when dropped say so; what a run
says at its start is said once in the process."""

from __future__ import annotations

import gc
import logging
import time

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

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.002)
        return torch.tensor(index)


@pytest.fixture(autouse=True)
def _nothing_said_yet(monkeypatch):
    monkeypatch.setattr(made_anew, "_said", set())


def _epoch(storage: str) -> autotune.DataLoader:
    """One epoch of a loader made for it, as a loop that makes one each epoch reads it."""
    loader = autotune.DataLoader(
        Paced(), batch_size=4, tune=3.0, window=BRIEF_WINDOW, storage=storage
    )
    assert sorted(i for b in loader for i in b.tolist()) == list(range(64))
    return loader


@pytest.mark.slow  # four epochs of real loaders: seconds
def test_loaders_dropped_while_they_explore_are_told_once_and_recorded_as_abandoned(
    tmp_path, caplog
) -> None:
    storage = f"sqlite:///{tmp_path}/a.db"
    with caplog.at_level(logging.INFO, logger="autotune"):
        for _ in range(4):
            loader = _epoch(storage)
            assert not loader.explorer or not loader.explorer.done  # each starts over
        del loader
        gc.collect()
    assert caplog.text.count(made_anew.DROPPED) == 1
    (study,) = optuna.get_all_study_names(storage)
    failed = [t for t in optuna.load_study(study_name=study, storage=storage).trials if
              store.has_failure(t)]  # fmt: skip
    kinds = {store.failure_kind(t) for t in failed}
    assert FailureKind.ABANDONED in kinds and FailureKind.INTERRUPTED not in kinds
    assert all(store.is_interrupted(t) for t in failed if t.user_attrs.get("failure"))


def test_what_a_run_says_at_its_start_is_said_once_in_the_process(caplog) -> None:
    line = "w2 pf2 persist as_is t1 bs4, as kept by an earlier run"
    with caplog.at_level(logging.INFO, logger="autotune"):
        for _ in range(3):
            made_anew.say_once(line, "online-train-1a2b")
        made_anew.say_once(line, "online-val-3c4d")  # another job's loader: its own line
    assert caplog.text.count("as kept by an earlier run") == 2
