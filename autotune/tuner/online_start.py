"""An offline study's pick, offered to ``autotune.DataLoader``: a run inside the training over
the loader a user builds with the study's ``loader_kwargs`` starts there, with no exploring.

When a study confirms its pick for the pipeline as it is (best.yaml's ``loader_kwargs``), it
records, with the pick, the fingerprint ``autotune.DataLoader`` gives that loader
(``pipeline.loader_job``): ``DataLoader(dataset, shuffle=True, **loader_kwargs)`` over the
user's Dataset (a DataModule's ``train_dataloader()`` as it makes it), or ``ImageFolder(root)``
for a folder, on this machine with the study's ranks. A run of that loader whose storage has no
setting kept by an earlier run of its own finds the newest such pick there (``offered``).
"""

from __future__ import annotations

import dataclasses
import datetime

import optuna
import torch
from torch.utils.data import BatchSampler, default_collate
from torchvision.datasets import ImageFolder

from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.loader_job import LoaderJob, collate_name, qualified_name
from autotune.pipeline.sources import Source
from autotune.pipeline.user_data import UserData
from autotune.session import Session
from autotune.tuner import store
from autotune.tuner.store import StudyKey


def offer(session: Session, study: optuna.Study, as_is: PipelineConfig) -> None:
    """Records ``as_is`` (the study's pick for the pipeline as it is) for runs of its loader."""
    job = loader_job(session, as_is)
    if job is None:
        return
    offered = {
        "job": job.fingerprint(session.facts, torch.cuda.is_available(), session.ranks),
        "settings": as_is.to_dict(),
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
    store.set_study_attr(study, StudyKey.ONLINE_START, offered)


def loader_job(session: Session, as_is: PipelineConfig) -> LoaderJob | None:
    """The loader a user builds with ``as_is``'s ``loader_kwargs``; None where it cannot be
    told: a folder with files the scan skipped (``ImageFolder`` reads them)."""
    source = session.source
    if isinstance(source, UserData):
        job = source.loader_job
    elif isinstance(source, Source) and not source.skipped:
        job = LoaderJob(
            dataset=qualified_name(ImageFolder),
            length=len(source),
            batch_size=None,
            sampler=qualified_name(BatchSampler),  # a shuffle's, as the loader batches it
            collate=collate_name(default_collate),
        )
    else:
        job = None
    if job is None:
        return None
    kwargs = as_is.loader_kwargs()
    return dataclasses.replace(
        job,
        batch_size=kwargs["batch_size"],
        drop_last=kwargs["drop_last"],
        in_order=kwargs.get("in_order", True),
    )


def offered(storage: str, fingerprint: str) -> tuple[str, PipelineConfig] | None:
    """The newest pick offered to the loader of ``fingerprint`` in ``storage``, and the name of
    the study that offered it."""
    found = [
        (offer_.get("at", ""), name, offer_["settings"])
        for name, offer_ in store.attr_of_studies(storage, StudyKey.ONLINE_START)
        if isinstance(offer_, dict) and offer_.get("job") == fingerprint
    ]
    if not found:
        return None
    _, name, settings = max(found)
    return name, PipelineConfig.from_dict(settings)
