"""An offline study's pick offered to autotune.DataLoader: the job it records is the one the
online run computes from the loader a user builds with the pick's ``loader_kwargs``, over a
folder or their own Dataset, and a run finds the newest pick for its loader alone."""

from __future__ import annotations

import dataclasses

import optuna
import torch
from helpers import make_session
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.datasets import ImageFolder

import autotune
from autotune.online import job_record
from autotune.pipeline import sources
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.user_data import UserData
from autotune.tuner import online_start, store
from autotune.tuner.store import StudyKey

AS_IS = PipelineConfig(decoder="as_is", num_workers=2, batch_size=8, drop_last=False)


def _offered_job(session, as_is: PipelineConfig = AS_IS) -> str:
    job = online_start.loader_job(session, as_is)
    assert job is not None
    return job.fingerprint(session.facts, torch.cuda.is_available(), session.ranks)


def _online_job(loader: DataLoader, session) -> str:
    return job_record.job_fingerprint(loader, session.facts, session.ranks)


def test_over_a_folder_the_job_is_imagefolder_read_with_the_pick_s_loader_kwargs() -> None:
    source = sources.synthetic(count=12, num_classes=2, size=(32, 24))
    session = make_session(source=source)
    kwargs = AS_IS.loader_kwargs()
    dataset = ImageFolder(str(source.root))
    offered = _offered_job(session)
    assert offered == _online_job(DataLoader(dataset, shuffle=True, **kwargs), session)
    assert offered == _online_job(autotune.DataLoader(dataset, shuffle=True, **kwargs), session)
    # what the loader cannot change is the job: another batch size, or drop_last
    assert offered != _online_job(DataLoader(dataset, shuffle=True, batch_size=16), session)
    other = {**kwargs, "drop_last": True}
    assert offered != _online_job(DataLoader(dataset, shuffle=True, **other), session)


def test_over_your_own_dataset_the_job_has_its_class_length_and_collate() -> None:
    data = UserData.check(
        "userdata_example.Spectrograms", {"count": 8}, "userdata_example.pad_collate"
    )
    session = make_session(source=data)
    dataset, collate = data.build(), data.collate()
    kwargs = AS_IS.loader_kwargs()
    mine = autotune.DataLoader(dataset, shuffle=True, collate_fn=collate, **kwargs)
    assert _offered_job(session) == _online_job(mine, session)
    assert _offered_job(session) != _online_job(
        DataLoader(dataset, shuffle=True, **kwargs), session
    )
    # two ranks: each over its DistributedSampler's share
    two = dataclasses.replace(session, ranks=2)
    shard = DistributedSampler(dataset, num_replicas=2, rank=0)
    ranked = DataLoader(dataset, sampler=shard, collate_fn=collate, **kwargs)
    assert _offered_job(two) == _online_job(ranked, two) != _offered_job(session)


def test_a_folder_whose_scan_skipped_files_offers_nothing(tmp_path) -> None:
    source = dataclasses.replace(
        sources.synthetic(count=12, num_classes=2, size=(32, 24)),
        skipped=(("class_00/broken.jpg", "not an image"),),
    )
    assert online_start.loader_job(make_session(source=source), AS_IS) is None


def _offering_study(storage: str, name: str, job: str, settings: PipelineConfig, at: str) -> None:
    study = optuna.create_study(storage=storage, study_name=name)
    offered = {"job": job, "settings": settings.to_dict(), "at": at}
    store.set_study_attr(study, StudyKey.ONLINE_START, offered)


def test_the_newest_pick_for_the_loader_is_found_and_no_other_loader_s(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    assert online_start.offered(storage, "abc") is None
    older, newer = AS_IS, dataclasses.replace(AS_IS, num_workers=1)
    _offering_study(storage, "newer", "abc", newer, "2026-12-02T10:00:00+00:00")
    _offering_study(storage, "older", "abc", older, "2026-12-01T10:00:00+00:00")
    _offering_study(storage, "other", "xyz", older, "2026-12-03T10:00:00+00:00")
    optuna.create_study(storage=storage, study_name="offers nothing")
    assert online_start.offered(storage, "abc") == ("newer", newer)
    assert online_start.offered(storage, "xyz") == ("other", older)
    assert online_start.offered(storage, "none") is None
