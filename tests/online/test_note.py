"""The note of the kept setting on this host: a later run starts there before its first batch
and opens the study's storage only when it ends, where the note follows the storage."""

from __future__ import annotations

import dataclasses
import json

import optuna
import pytest
import torch
from helpers import BRIEF_WINDOW

import autotune
from autotune.machine import detect
from autotune.online import job_record, note, record
from autotune.online.proposals import sampler
from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store
from autotune.tuner.store import StudyKey

DATA = torch.utils.data.TensorDataset(torch.arange(32))


def _loader(storage: str) -> autotune.DataLoader:
    return autotune.DataLoader(DATA, batch_size=4, storage=storage)


def _job(storage: str) -> job_record.Job:
    loader = _loader(storage)
    fingerprint = job_record.job_fingerprint(loader, detect(want_cuda=torch.cuda.is_available()))
    return job_record.Job(storage, job_record.study_name(loader, fingerprint), fingerprint)


def _kept_in_storage(job: job_record.Job, kept: PipelineConfig | None, rate: object = 0.0) -> None:
    study = record.open_record(*job, sampler())
    assert study is not None
    store.set_study_attr(study, StudyKey.ONLINE_KEPT, kept.to_dict() if kept else None)
    store.set_study_attr(study, StudyKey.ONLINE_KEPT_RATE, rate)


def _one_epoch(loader: autotune.DataLoader) -> list[PipelineConfig]:
    """Each batch's settings, the storage not opened."""
    seen = []
    for _ in loader:
        seen.append(loader.settings)
        assert loader.tuning.start.job is not None and loader.tuning.start.job.study is None
    return seen


def _run_ends(loader: autotune.DataLoader) -> None:
    """The loader collected, as at the end of a run: its check of the storage runs once."""
    loader.tuning.start._check_at_end()
    assert not loader.tuning.start._check_at_end.still_active()


def test_a_later_run_starts_at_the_noted_setting_and_checks_the_storage_when_it_ends(
    tmp_path,
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    kept = dataclasses.replace(_loader(storage).settings, main_threads=1)
    _kept_in_storage(job, kept)
    note.write(*job, note.Kept(kept))

    loader = _loader(storage)
    for _ in range(2):  # every epoch read with the noted setting, the storage not opened
        assert set(_one_epoch(loader)) == {loader.settings} and loader.settings.main_threads == 1
    assert loader.explorer is None and not loader.switches  # nothing explored
    _run_ends(loader)
    job_record = loader.tuning.start.job
    assert job_record is not None and job_record.study is not None  # opened at the end
    assert note.read(*job) == (kept, None)  # agreed


def test_the_storage_wins_over_a_note_it_does_not_back_from_the_next_run_on(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    start = _loader(storage).settings
    noted = dataclasses.replace(start, main_threads=1)
    note.write(*job, note.Kept(noted))
    # the storage kept another setting: this run keeps the note's, the next starts at it
    other = dataclasses.replace(start, main_threads=2)
    _kept_in_storage(job, other)
    loader = _loader(storage)
    assert {s.main_threads for s in _one_epoch(loader)} == {1}
    _run_ends(loader)
    assert note.read(*job) == (other, None)  # the note follows the storage
    loader = _loader(storage)
    assert {s.main_threads for s in _one_epoch(loader)} == {2}

    # the storage kept nothing (the study started over): the note is dropped, the next explores
    _kept_in_storage(job, None)
    _run_ends(loader)
    assert note.read(*job) is None
    loader = _loader(storage)
    iter(loader)  # no note: the storage opened before the first batch
    tuning = loader.tuning
    assert tuning.share > 0 and tuning.start.job is not None and not tuning.start.job.deferred


def test_a_note_of_another_job_or_unreadable_is_no_note(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = job_record.Job(storage, "online-x", "fingerprint-a")
    note.write(*job, note.Kept(PipelineConfig(main_threads=1)))
    assert note.read(*job) == note.Kept(PipelineConfig(main_threads=1), None)
    assert note.read(storage, "online-x", "fingerprint-b") is None  # a name reused
    note.path(storage, "online-x").write_text("{ half a note")
    assert note.read(*job) is None
    # beside an SQLite file, by its name (a folder of several files: each its own notes); a
    # server's notes under the cache folder, by its address
    assert note.path(storage, "x").parent == tmp_path / note.FOLDER / "autotune.db"
    assert note.path(f"sqlite:///{tmp_path}/other.db", "x") != note.path(storage, "x")
    assert note.path("postgresql://h/db", "x") != note.path("postgresql://h/other", "x")


@pytest.mark.parametrize("written", ["fast", "inf", "nan", -3.0, None])
def test_a_note_whose_rate_cannot_be_read_keeps_its_setting_with_no_rate(tmp_path, written):
    """As the study's: the note's setting stands, its rate none (the run's first reading of
    it is then its rate), and the note is not dropped for it."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = job_record.Job(storage, "online-x", "fingerprint-a")
    setting = PipelineConfig(main_threads=1)
    text = json.dumps({"fingerprint": "fingerprint-a", "kept": setting.to_dict()})
    note.path(*job[:2]).parent.mkdir(parents=True)
    note.path(*job[:2]).write_text(text[:-1] + f', "samples_per_s": {json.dumps(written)}}}')
    assert note.read(*job) == note.Kept(setting, None)


@pytest.mark.parametrize(
    ("stored", "rate"),
    [(1234.5, 1234.5), ("fast", None), (float("inf"), None), (float("nan"), None), (0.0, None)],
)
def test_where_no_note_says_the_run_starts_at_the_setting_and_rate_the_study_kept(
    tmp_path, stored, rate
) -> None:
    """A rate the study cannot give as a finite number above 0 (a newer autotune's? edited by
    hand?) is none: the setting still stands."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    kept = PipelineConfig(main_threads=1)
    _kept_in_storage(job, kept, rate=stored)
    assert job_record.JobRecord(job, sampler()).start() == (kept, rate)
    assert note.read(*job) == (kept, rate)  # noted for the next run


def test_a_pick_noted_without_a_rate_is_kept_at_the_run_s_first_reading_when_it_ends(
    tmp_path,
) -> None:
    """A run that started at an offline study's pick and ended before reading it noted the
    pick without a rate. The next run starts from that note; its first reading of the pick is
    recorded as its rate once the study is opened, at its end, never during the run."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    pick = dataclasses.replace(_loader(storage).settings, main_threads=1)
    offline = optuna.create_study(storage=storage, study_name="offline")
    at = "2026-12-01T10:00:00+00:00"
    offered = {"job": job.fingerprint, "settings": pick.to_dict(), "at": at}
    store.set_study_attr(offline, StudyKey.ONLINE_START, offered)
    note.write(*job, note.Kept(pick))
    loader = autotune.DataLoader(DATA, batch_size=4, storage=storage, window=BRIEF_WINDOW)
    for _ in range(20):
        if loader.readings:
            break
        assert set(_one_epoch(loader)) == {pick}  # the storage not opened meanwhile
    assert loader.readings and loader.explorer is None
    _run_ends(loader)
    rate = round(loader.readings[0].samples_per_s, 2)
    assert note.read(*job) == (pick, rate)
    study = record.open_record(*job, sampler())
    assert study is not None and record.kept(study) == (pick, rate)


@pytest.mark.parametrize("storage", ["sqlite:///:memory:", "sqlite://"])
def test_no_note_is_written_or_read_for_a_storage_in_memory(
    storage, tmp_path, monkeypatch
) -> None:
    # what a storage in memory kept ends with its process: a note of it would start the next
    # run at a setting its new, empty storage does not hold
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(note, "default_cache_dir", lambda: tmp_path / "cache")
    job = job_record.Job(storage, "online-x", "f" * 12)
    note.write(*job, note.Kept(PipelineConfig(num_workers=1), 100.0))
    assert not list(tmp_path.rglob("*.json"))
    note.path(storage, job.name).parent.mkdir(parents=True)
    note.path(storage, job.name).write_text(
        json.dumps({"fingerprint": job.fingerprint, "kept": PipelineConfig().to_dict()})
    )
    assert note.read(*job) is None


def test_a_setting_a_loader_of_this_process_kept_is_said_to_be_this_process_s_own(
    tmp_path,
) -> None:
    """A loop that makes its loader anew: once one loader keeps a setting, the next starts
    from it, and says it was kept earlier in this process, not by an earlier run."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    earlier = job_record.JobRecord(job, sampler())
    _kept_in_storage(job, kept := PipelineConfig(main_threads=1), rate=100.0)
    assert earlier.start() == (kept, 100.0) and earlier.origin == "kept by an earlier run"
    earlier.note_kept(kept, None)  # kept again by this process's loader
    later = job_record.JobRecord(job, sampler())
    start = later.start()
    assert start is not None and start.settings == kept and later.origin == job_record.KEPT_HERE


def test_a_setting_this_process_kept_and_forgot_marks_no_later_start(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    earlier = job_record.JobRecord(job, sampler())
    _kept_in_storage(job, kept := PipelineConfig(main_threads=1), rate=100.0)
    earlier.start()
    earlier.note_kept(kept, None)
    earlier.forget_kept()  # its workers failed here: kept no more
    _kept_in_storage(job, kept, rate=100.0)  # kept again, by a run elsewhere
    later = job_record.JobRecord(job, sampler())
    assert later.start() is not None and later.origin == "kept by an earlier run"
