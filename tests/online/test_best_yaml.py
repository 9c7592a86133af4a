"""The best.yaml a run of autotune.DataLoader writes when it keeps a setting: where the study's
would be, read as an offline study's is (``autotune.loader_kwargs`` hands it to torch's own
DataLoader), with the rates the run read; written once, and never in the training's way."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import optuna
import pytest
import torch
from helpers import BRIEF_WINDOW

import autotune
from autotune.machine import detect
from autotune.online import best_yaml, job_record, note
from autotune.pipeline import best_file
from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store
from autotune.tuner.result import trial_counts
from autotune.tuner.store import StudyKey

BATCHES = {"batch_size": 4, "drop_last": True}  # the runs' own
BATCHES_OWN = ("drop_last", "in_order")  # the caller's own, whatever the run was tuned with


class Paced(torch.utils.data.Dataset):
    """Samples that wait 2 ms each on a read: workers read them faster than the loop alone."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> tuple[torch.Tensor]:
        time.sleep(0.002)
        return (torch.tensor(index),)


def _explored(storage: str, epochs: int = 30) -> autotune.DataLoader:
    """A run that explores until it keeps a setting, each epoch read whole."""
    run = {"tune": 2.0, "window": BRIEF_WINDOW, "storage": storage}
    loader = autotune.DataLoader(Paced(), **BATCHES, **run)
    for _ in range(epochs):
        assert sorted(i for (b,) in loader for i in b.tolist()) == list(range(64))
        explorer = loader.explorer
        # done, and the switch to what it kept made (one decided as an epoch ended is made
        # at the next epoch's first batch)
        if explorer is not None and explorer.done and loader.settings == explorer.current:
            return loader
    raise AssertionError(f"nothing kept in {epochs} epochs")


@pytest.mark.slow
def test_a_loop_that_leaves_before_its_epoch_ends_still_has_the_setting_kept_written(
    tmp_path,
) -> None:
    # a loop of max_steps: it leaves its one long epoch once exploring settles
    storage = f"sqlite:///{tmp_path}/autotune.db"
    data = torch.utils.data.Subset(Paced(), [i % 64 for i in range(4000)])
    run = {"tune": 2.0, "window": BRIEF_WINDOW, "storage": storage}
    loader = autotune.DataLoader(data, batch_size=4, **run)
    steps = 0
    for _ in loader:
        steps += 1
        if loader.explorer is not None and loader.explorer.settled:
            break
    assert steps < len(loader)  # its epoch never ended
    kept = loader.explorer.current
    study = loader.explorer.study.study_name
    written = best_file.read(tmp_path / study / "best.yaml")
    assert written.as_is == kept
    assert loader.tuning.start.job is not None
    assert note.read(*loader.tuning.start.job.job).settings == kept  # the next run starts there


def test_the_folder_is_the_study_s_beside_an_sqlite_storage_else_under_studies() -> None:
    assert best_yaml.folder("sqlite:///runs/autotune.db", "online-x") == Path("runs/online-x")
    assert best_yaml.folder("sqlite:////abs/a.db", "s") == Path("/abs/s")
    server = "postgresql://me:secret@db.example/autotune"
    assert best_yaml.folder(server, "online-x") == Path("studies/online-x")


@pytest.mark.slow
def test_a_run_that_keeps_a_setting_writes_it_with_its_rates_for_torch_s_own_loader(
    tmp_path, caplog
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        loader = _explored(storage)
        loader.release()
    explorer = loader.explorer
    assert explorer is not None and explorer.best is not None
    kept, start = explorer.best, explorer.start_reading
    assert start is not None and kept.settings == loader.settings != start.settings
    path = tmp_path / explorer.study.study_name / "best.yaml"
    assert f"kept {kept.settings.short()}; {path}" in caplog.text

    # torch's own DataLoader, given the file, reads with the kept setting
    threads = torch.get_num_threads()
    try:
        kwargs = autotune.loader_kwargs(path)
        assert torch.get_num_threads() == kept.settings.main_threads
    finally:
        torch.set_num_threads(threads)
    # the settings it tuned and its batch size; what shapes the batches stays the caller's
    tuned = {k: v for k, v in kept.settings.loader_kwargs().items() if k not in BATCHES_OWN}
    assert kwargs == tuned and kwargs["batch_size"] == 4
    plain = torch.utils.data.DataLoader(Paced(), shuffle=True, drop_last=True, **kwargs)
    assert sorted(i for (b,) in plain for i in b.tolist()) == list(range(64))
    del plain

    written = best_file.read(path)
    assert written.as_is == written.config == kept.settings
    rate = store.study_attr(explorer.study, StudyKey.ONLINE_KEPT_RATE)
    assert written.as_is_measured.samples_per_s == pytest.approx(rate, abs=0.1)
    assert written.measured.baseline_samples_per_s == round(start.samples_per_s, 1)
    speedup = round(kept.samples_per_s / start.samples_per_s, 2)
    assert written.measured.speedup_vs_baseline == speedup > 1
    picked = explorer.proposals.trial_of(kept.settings)
    assert written.measured.picked == f"trial {picked}"
    assert explorer.study.trials[picked].value == pytest.approx(kept.samples_per_s)
    assert start.settings.short() in written.baseline and "your DataLoader" in written.baseline
    assert written.study.kept_by == best_yaml.KEPT_BY
    assert written.study.name == explorer.study.study_name
    assert written.study.trials == trial_counts(explorer.study.trials)
    assert written.machine == best_file.MachineSection.of(detect(want_cuda=True))
    assert written.workload.dataset.endswith("Paced of 64 samples")

    # the next run starts at the kept setting and explores nothing: the file stands as it was
    text = path.read_text()
    again = autotune.DataLoader(Paced(), **BATCHES, window=BRIEF_WINDOW, storage=storage)
    for _ in range(3):
        sum(1 for _ in again)
    assert again.settings == kept.settings and again.explorer is None
    again.release()
    assert path.read_text() == text


def _in_its_way(path: Path, what: str) -> None:
    """Where the run's best.yaml goes: a folder, or a best.yaml of python -m autotune's."""
    if what == "a folder":
        path.mkdir(parents=True)
        return
    path.parent.mkdir(parents=True)
    best_file.write(path, best_file.BestFile(config=PipelineConfig()))  # kept_by none


@pytest.mark.slow
@pytest.mark.parametrize("what", ["a folder", "a study's best.yaml"])
def test_a_best_yaml_that_cannot_be_written_is_one_warning_and_the_run_goes_on(
    tmp_path, caplog, what
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    probe = autotune.DataLoader(Paced(), **BATCHES)  # the same job: its study's name
    job = job_record.job_fingerprint(probe, detect(want_cuda=torch.cuda.is_available()))
    path = tmp_path / job_record.study_name(probe, job) / "best.yaml"
    _in_its_way(path, what)
    before = path.read_text() if path.is_file() else None
    with caplog.at_level(logging.WARNING, logger="autotune.online.loader"):
        loader = _explored(storage)
        sum(1 for _ in loader)  # the run goes on, at the kept setting
        loader.release()
    warned = [r for r in caplog.records if "best.yaml" in r.getMessage()]
    assert len(warned) == 1 and "not recorded: best.yaml failed" in warned[0].getMessage()
    assert (path.read_text() if path.is_file() else None) == before  # never overwritten
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.user_attrs[StudyKey.ONLINE_KEPT] == loader.settings.to_dict()  # recorded
