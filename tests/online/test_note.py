"""The note of the kept setting on this host: a later run starts there before its first batch
and opens the study's storage beside the training, checking it at an epoch's end, where the
storage wins."""

from __future__ import annotations

import dataclasses
import threading

import torch

import autotune
from autotune.machine import detect
from autotune.online import note, record
from autotune.online.explorer import sampler
from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store
from autotune.tuner.store import StudyKey

DATA = torch.utils.data.TensorDataset(torch.arange(32))


def _loader(storage: str) -> autotune.DataLoader:
    return autotune.DataLoader(DATA, batch_size=4, storage=storage)


def _job(storage: str) -> record.Job:
    loader = _loader(storage)
    fingerprint = record.job_fingerprint(loader, detect(want_cuda=torch.cuda.is_available()))
    return record.Job(storage, record.study_name(loader, fingerprint), fingerprint)


def _kept_in_storage(job: record.Job, kept: PipelineConfig | None) -> None:
    study = record.open_record(*job, sampler())
    assert study is not None
    store.set_study_attr(study, StudyKey.ONLINE_KEPT, kept.to_dict() if kept else None)


def _one_epoch(
    loader: autotune.DataLoader, *, open_by_its_end: bool = True
) -> list[PipelineConfig]:
    """Each batch's settings, the storage not checked until the epoch ended (and open by
    then: its thread waited for at the first batch, so the check is not left to chance)."""
    seen = []
    for _ in loader:
        seen.append(loader.settings)
        assert loader._job is not None and loader._job.study is None
        opening = loader._job._opening
        if open_by_its_end and opening is not None:
            opening.join()
    return seen


def test_a_later_run_starts_at_the_noted_setting_and_checks_the_storage_after_its_first_epoch(
    tmp_path,
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    kept = dataclasses.replace(_loader(storage).settings, main_threads=1)
    _kept_in_storage(job, kept)
    note.write(*job, kept)

    loader = _loader(storage)
    assert set(_one_epoch(loader)) == {loader.settings} and loader.settings.main_threads == 1
    assert loader._job is not None and loader._job.study is not None  # opened at the end
    assert loader.explorer is None and not loader.switches  # agreed: nothing explored


def test_the_storage_wins_over_a_note_it_does_not_back(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    start = _loader(storage).settings
    noted = dataclasses.replace(start, main_threads=1)
    note.write(*job, noted)
    # the storage kept another setting: the run switches to it after the first epoch
    _kept_in_storage(job, dataclasses.replace(start, main_threads=2))
    loader = _loader(storage)
    assert {s.main_threads for s in _one_epoch(loader)} == {1}
    sum(1 for _ in loader)
    assert loader.settings.main_threads == 2
    assert note.read(*job) == loader.settings  # the note follows the storage

    # the storage kept nothing (the study started over): the note is dropped, exploring begins
    _kept_in_storage(job, None)
    loader = _loader(storage)
    _one_epoch(loader)
    assert note.read(*job) is None and loader._share > 0


def test_a_note_of_another_job_or_unreadable_is_no_note(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = record.Job(storage, "online-x", "fingerprint-a")
    note.write(*job, PipelineConfig(main_threads=1))
    assert note.read(*job) == PipelineConfig(main_threads=1)
    assert note.read(storage, "online-x", "fingerprint-b") is None  # a name reused
    note.path(storage, "online-x").write_text("{ half a note")
    assert note.read(*job) is None
    # beside an SQLite file, by its name (a folder of several files: each its own notes); a
    # server's notes under the cache folder, by its address
    assert note.path(storage, "x").parent == tmp_path / note.FOLDER / "autotune.db"
    assert note.path(f"sqlite:///{tmp_path}/other.db", "x") != note.path(storage, "x")
    assert note.path("postgresql://h/db", "x") != note.path("postgresql://h/other", "x")


def test_an_epoch_ends_without_waiting_for_the_storage_to_open(tmp_path, monkeypatch) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    kept = dataclasses.replace(_loader(storage).settings, main_threads=1)
    _kept_in_storage(job, kept)
    note.write(*job, kept)
    opening = threading.Event()
    opened = record.open_record

    def held_open(*args):  # a storage slow to open (a busy server): held until released
        opening.wait(timeout=60)
        return opened(*args)

    monkeypatch.setattr(record, "open_record", held_open)
    loader = _loader(storage)
    assert set(_one_epoch(loader, open_by_its_end=False)) == {loader.settings}
    assert loader._job is not None and loader._job.study is None  # not waited for
    opening.set()
    _one_epoch(loader)  # checked at the end of the epoch after it opened
    assert loader._job.study is not None and not loader.switches
