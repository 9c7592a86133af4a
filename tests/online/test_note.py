"""The note of the kept setting on this host: a later run starts there before its first batch
and opens the study's storage only when it ends, where the note follows the storage."""

from __future__ import annotations

import dataclasses
import logging

import torch
from helpers import BRIEF_WINDOW

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


def _kept_in_storage(job: record.Job, kept: PipelineConfig | None, rate: float = 0.0) -> None:
    study = record.open_record(*job, sampler())
    assert study is not None
    store.set_study_attr(study, StudyKey.ONLINE_KEPT, kept.to_dict() if kept else None)
    store.set_study_attr(study, StudyKey.ONLINE_KEPT_RATE, rate)


def _one_epoch(loader: autotune.DataLoader) -> list[PipelineConfig]:
    """Each batch's settings, the storage not opened."""
    seen = []
    for _ in loader:
        seen.append(loader.settings)
        assert loader._job is not None and loader._job.study is None
    return seen


def _run_ends(loader: autotune.DataLoader) -> None:
    """The loader collected, as at the end of a run: its check of the storage runs once."""
    loader._check_at_end()
    assert not loader._check_at_end.still_active()


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
    assert loader._job is not None and loader._job.study is not None  # opened at the end
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
    assert loader._share > 0 and loader._job is not None and not loader._job.deferred


def test_a_note_of_another_job_or_unreadable_is_no_note(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = record.Job(storage, "online-x", "fingerprint-a")
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


def test_a_run_far_off_the_rate_its_setting_was_kept_at_explores_from_its_first_reading(
    tmp_path, caplog
) -> None:
    """The note's rate and the run's first reading: a loop a hundred times slower than the
    one the setting was kept on (another transform, model or step, which the fingerprint
    cannot see) explores at once; the same note without a rate (an offline study's pick)
    explores nothing."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)

    def run_from(kept: note.Kept | None, storage: str = storage) -> autotune.DataLoader:
        if kept is not None:
            note.write(*job, kept)
        loader = autotune.DataLoader(DATA, batch_size=4, storage=storage, window=BRIEF_WINDOW)
        for _ in range(20):
            if loader.readings:
                break
            assert sorted(i for (b,) in loader for i in b.tolist()) == list(range(32))
        assert loader.readings  # the run's first reading of the noted setting
        return loader

    start = _loader(storage).settings
    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        assert run_from(note.Kept(start)).explorer is None
        far_off = run_from(note.Kept(start, samples_per_s=100 * 10**6))
    rate = far_off.readings[0].samples_per_s
    assert far_off.explorer is not None  # the study opened, the run's own reading its first
    assert f"reads {rate:.0f} samples/s, kept at 100000000 by an earlier run" in caplog.text
    # where there is no note, as the study's storage recorded it
    elsewhere = f"sqlite:///{tmp_path}/elsewhere.db"
    _kept_in_storage(_job(elsewhere), start, rate=100 * 10**6)
    assert run_from(None, elsewhere).explorer is not None


def test_a_rate_not_kept_with_the_setting_is_the_run_s_first_reading_kept_when_it_ends(
    tmp_path,
) -> None:
    """A note and a study of an earlier autotune's, which kept no rate: the run's first
    reading of the setting is recorded as its rate once the study is opened, at its end."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    job = _job(storage)
    kept = dataclasses.replace(_loader(storage).settings, main_threads=1)
    _kept_in_storage(job, kept)
    note.write(*job, note.Kept(kept))
    loader = autotune.DataLoader(DATA, batch_size=4, storage=storage, window=BRIEF_WINDOW)
    for _ in range(20):
        if loader.readings:
            break
        assert set(_one_epoch(loader)) == {kept}  # the storage not opened meanwhile
    assert loader.readings and loader.explorer is None
    _run_ends(loader)
    rate = round(loader.readings[0].samples_per_s, 2)
    assert note.read(*job) == (kept, rate)
    study = record.open_record(*job, sampler())
    assert study is not None and store.study_attr(study, StudyKey.ONLINE_KEPT_RATE) == rate
