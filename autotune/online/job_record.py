"""A run's record of its job: which job it is (a fingerprint of what the loader cannot change:
the machine and the ranks sharing it, the Dataset's class and length, the batches' size,
sampler, collate, ``drop_last`` and ``in_order``, whether CUDA is there), and where its run
starts: the setting an earlier run of the job kept, from this host's note of it at once (the
study then checked as the run ends: ``note``), else from the study (``record``), else an
offline study's pick for the loader; none: the run explores from your own settings.
"""

from __future__ import annotations

from typing import NamedTuple

import optuna
import torch

from autotune.machine import MachineFacts
from autotune.online import note
from autotune.online.note import Kept
from autotune.online.reading import Reading
from autotune.online.record import (
    as_stored,
    drop_kept,
    kept,
    not_recorded,
    open_record,
    record_kept,
)
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.loader_job import LoaderJob
from autotune.tuner import online_start

YOURS = "your DataLoader arguments"  # where a run starts with no earlier setting to start at
KEPT_HERE = "kept earlier in this process"  # by a loader before it (one made anew each epoch)
_kept_here: set[Job] = set()  # the jobs a loader of this process kept a setting for


def job_fingerprint(
    loader: torch.utils.data.DataLoader, facts: MachineFacts, ranks: int = 1
) -> str:
    """What the loader's settings are tuned for, hashed: the same job on the same machine
    (of ``ranks`` ranks, each with its loader)."""
    return LoaderJob.of(loader).fingerprint(facts, torch.cuda.is_available(), ranks)


def study_name(loader: torch.utils.data.DataLoader, fingerprint: str) -> str:
    return f"online-{type(loader.dataset).__name__.lower()}-{fingerprint}"


class Job(NamedTuple):
    """Where a job's record is kept, and what its settings are tuned for."""

    storage: str
    name: str  # the study's
    fingerprint: str


class JobRecord:
    """A run's record of its job: the study each setting tried goes to, and where the run
    starts: the setting an earlier run kept, from this host's note of it at once (the study
    then checked when the run ends: ``note``), else from the study."""

    def __init__(self, job: Job, sampler: optuna.samplers.BaseSampler) -> None:
        self.job, self._sampler = job, sampler
        self.study: optuna.Study | None = None
        self.deferred = False  # a note said where to start: the study is not open yet
        self._noted: Kept | None = None
        self._start_reading: Reading | None = None  # the run's first of the setting it started at
        self.origin = "kept by an earlier run"  # where the setting the run starts at is from

    @classmethod
    def of(
        cls,
        loader: torch.utils.data.DataLoader,
        facts: MachineFacts,
        storage: str,
        name: str | None,
        sampler: optuna.samplers.BaseSampler,
        ranks: int = 1,
    ) -> JobRecord:
        """The record of ``loader``'s job (on each of ``ranks`` ranks): study ``name``, or one
        named by its fingerprint."""
        fingerprint = job_fingerprint(loader, facts, ranks)
        return cls(Job(storage, name or study_name(loader, fingerprint), fingerprint), sampler)

    def start(self) -> Kept | None:
        """The setting kept by an earlier run, where this one starts; None: explore."""
        self._noted = note.read(*self.job)
        self.deferred = self._noted is not None
        earlier = self._noted if self.deferred else self._open()
        if earlier is not None and self.job in _kept_here:  # a loader before this one's
            self.origin = KEPT_HERE
        return earlier

    def check_deferred(self) -> None:
        """Opens the study a note put off and has the note follow it: the setting it kept
        (where it kept none, the note is dropped and the next run explores)."""
        if self.deferred:
            self.deferred = False
            self._open()

    def note_kept(self, settings: PipelineConfig, best: Reading | None) -> bool:
        """``settings`` kept and recorded: noted for the next run here, with the rate they
        were kept at (``best``'s, the fastest measured, where it is theirs); whether that
        was news (a setting or rate not noted yet)."""
        rate = best.samples_per_s if best is not None and best.settings == settings else None
        _kept_here.add(self.job)
        return self._note(Kept(settings, rate and as_stored(rate)))

    def forget_kept(self) -> None:
        """The setting an earlier run kept failed here: no longer kept, in the study (opened
        now where a note put it off) nor in the note, so that the next run explores."""
        self.deferred, self._noted = False, None
        _kept_here.discard(self.job)
        note.forget(self.job.storage, self.job.name)
        self.study = self.study or open_record(*self.job, self._sampler)
        if self.study is None:  # the storage failed: one warning said so
            return
        try:
            drop_kept(self.study)
        except Exception as exc:  # noqa: BLE001 - the training goes on, unrecorded
            not_recorded(self.job.name, exc)

    def started_at(self, reading: Reading) -> None:
        """The run's first reading of the setting it started at. Where no rate was kept with
        it (an offline study's pick), it is recorded as kept at this rate, so that a later run
        can tell when its job is another (``DriftWatch``); where a note put the study off,
        once it is opened."""
        self._start_reading = reading
        self._keep_start_rate()

    def _keep_start_rate(self) -> None:
        reading, noted = self._start_reading, self._noted
        if reading is None or self.study is None or noted is None or noted.samples_per_s:
            return
        if reading.settings == noted.settings:
            record_kept(self.study, reading)
            self._note(Kept(noted.settings, as_stored(reading.samples_per_s)))

    def _note(self, kept: Kept) -> bool:
        if self.study is None or kept == self._noted:  # once
            return False
        note.write(*self.job, kept)
        self._noted = kept
        return True

    def _open(self) -> Kept | None:
        self.study = open_record(*self.job, self._sampler)
        earlier = kept(self.study)
        if earlier is None and self.study is not None:
            study, pick = offline_pick(self.job)
            earlier = Kept(pick) if pick is not None else None
            self.origin = f"the offline study {study} picked"
        if earlier is not None:
            self._note(earlier)
            self._keep_start_rate()
        elif self.study is not None:
            note.forget(self.job.storage, self.job.name)
        return earlier


def offline_pick(job: Job) -> tuple[str, PipelineConfig | None]:
    """The pick an offline study in the job's storage made for this loader (the newest), and
    the study's name, where no run of the job kept one (``tuner.online_start``)."""
    try:
        return online_start.offered(job.storage, job.fingerprint) or ("", None)
    except Exception as exc:  # noqa: BLE001 - the training goes on, from its own settings
        not_recorded(job.storage, exc)
        return "", None
