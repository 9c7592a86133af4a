"""Where ``autotune.DataLoader`` keeps what it explored: an Optuna study in the study storage
(``sqlite:///studies/autotune.db`` by default, as the command's), one per job, named by a
fingerprint of what the loader cannot change: the machine (and the ranks sharing it), the
Dataset (its class and length), the batches (size, sampler, collate, ``drop_last``,
``in_order``) and whether CUDA is there. Each setting explored is a trial with the tuner's
trial attributes; the setting kept is a study attribute, where a later run of the same job
starts, exploring nothing unless its rate moves.

A storage that cannot be opened or written never stops the training: one warning, and the
run goes on unrecorded.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import NamedTuple

import optuna
import torch
from optuna.trial import TrialState

from autotune.machine import MachineFacts
from autotune.online import note
from autotune.online.note import Kept
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.loader_job import LoaderJob
from autotune.runtime.failures import Failure, FailureKind, first_line
from autotune.tuner import online_start, store
from autotune.tuner import storage as study_storage
from autotune.tuner.lease import is_gone, this_process
from autotune.tuner.store import StudyKey, TrialKey

log = logging.getLogger("autotune.online.loader")

DEFAULT_STORAGE = "sqlite:///studies/autotune.db"
STOPPED = Failure(FailureKind.INTERRUPTED, "the run stopped while measuring it")
# queued by an earlier run that ended before asking for it, in a space this run's is not
# (sized by another machine, or by reads that waited there)
UNASKED = Failure(FailureKind.INTERRUPTED, "queued by an earlier run that ended before asking it")
OUTSIDE = Failure(FailureKind.INVALID_CONFIG, "queued by an earlier run, outside this run's space")
# the loop changes its Dataset between epochs (``dataset_state``): a copy kept alive goes stale
RENEWED = Failure(
    FailureKind.INVALID_CONFIG,
    "the loop changes its Dataset between epochs, which workers that persist would not see",
)


def untimeable(batches_per_epoch: int) -> Failure:
    """A setting a whole epoch could not time."""
    why = f"its warm-up and one sub-window are longer than an epoch of {batches_per_epoch} batches"
    return Failure(FailureKind.UNTIMEABLE, f"could not be timed on this run: {why}")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Optuna's lines per trial ("Trial 3 finished...") kept out of the user's training
    log, and only for these calls: Optuna's verbosity is the process's."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


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
        return self._noted if self.deferred else self._open()

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
        return self._note(Kept(settings, rate and as_stored(rate)))

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


def open_record(
    storage: str, name: str, fingerprint: str, sampler: optuna.samplers.BaseSampler
) -> optuna.Study | None:
    """The job's study (created where it is not there yet); None, with one warning, where
    the storage cannot be opened. A trial left running by a run of this host that has
    ended (killed outright), or queued by an earlier run and never asked, is marked failed."""
    try:
        study_storage.make_room(storage)
        with warnings.catch_warnings(), quiet():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study = optuna.create_study(
                study_name=name,
                storage=storage,
                direction="maximize",
                sampler=sampler,
                load_if_exists=True,
            )
        store.set_study_attr(study, StudyKey.FINGERPRINT, fingerprint)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if is_gone(store.trial_attr(trial, TrialKey.HOST, "")):
                study_storage.mark_failed(study, trial._trial_id, STOPPED)
        # queued by an earlier run (its priors, its runners-up after a drift): never this
        # run's first ask, which Optuna would take them for
        for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            study_storage.mark_failed(study, trial._trial_id, UNASKED)
        return study
    except Exception as exc:  # noqa: BLE001 - the training goes on, unrecorded
        not_recorded(storage, exc)
        return None


def kept(study: optuna.Study | None) -> Kept | None:
    """The setting an earlier run of the job kept, if one did, and its rate then."""
    if study is None:
        return None
    found = store.study_attr(study, StudyKey.ONLINE_KEPT)
    rate = note.rate_of(store.study_attr(study, StudyKey.ONLINE_KEPT_RATE))
    try:
        return Kept(PipelineConfig.from_dict(found), rate) if found else None
    except (ValueError, TypeError) as exc:  # a newer autotune's, say: explored afresh
        not_recorded(f"the setting kept in {study.study_name}", exc)
        return None


def offline_pick(job: Job) -> tuple[str, PipelineConfig | None]:
    """The pick an offline study in the job's storage made for this loader (the newest), and
    the study's name, where no run of the job kept one (``tuner.online_start``)."""
    try:
        return online_start.offered(job.storage, job.fingerprint) or ("", None)
    except Exception as exc:  # noqa: BLE001 - the training goes on, from its own settings
        not_recorded(job.storage, exc)
        return "", None


def record_asked(trial: optuna.Trial) -> None:
    """A setting about to be measured: by this process (a run killed outright leaves its
    trial running; the next run of the job marks it failed)."""
    store.set_trial_attr(trial, TrialKey.HOST, this_process())


def record_failed(trial: optuna.Trial, failure: Failure) -> None:
    """Why a setting explored failed (its workers, or no epoch could time it)."""
    store.set_trial_attr(trial, TrialKey.FAILURE, failure.to_dict())


def record_stopped(study: optuna.Study, trial: optuna.Trial) -> None:
    """The run stopped while measuring ``trial`` (Ctrl-C, the loop left): failed, with why."""
    try:
        record_failed(trial, STOPPED)
        study.tell(trial, state=TrialState.FAIL)
    except Exception as exc:  # noqa: BLE001 - at exit: one warning, never a traceback
        not_recorded(study.study_name, exc)


def record_trial(trial: optuna.Trial, reading: Reading) -> None:
    """A setting explored, with the tuner's names for what was measured."""
    for key, value in (
        (TrialKey.CONFIG, reading.settings.short()),
        (TrialKey.PIPELINE, reading.settings.to_dict()),
        (TrialKey.SPREAD, round(reading.spread, 4)),
        (TrialKey.DATA_WAIT, round(reading.data_wait, 4)),
        (TrialKey.TIME_TO_FIRST_BATCH, round(reading.first_batch_s, 4)),
    ):
        store.set_trial_attr(trial, key, value)
    if reading.epoch_start_s:  # an epoch began while it was read: its first batch's wait
        store.set_trial_attr(trial, TrialKey.EPOCH_START, round(reading.epoch_start_s, 4))
    if reading.beaten_after:  # clearly below the best so far, as the study prunes a trial
        store.set_trial_attr(trial, TrialKey.PRUNED_AFTER, reading.beaten_after)


def record_repeat(trial: optuna.Trial, config: PipelineConfig, earlier: int) -> None:
    """A setting proposed again: told what trial ``earlier`` measured, run not again."""
    store.set_trial_attr(trial, TrialKey.CONFIG, config.short())
    store.set_trial_attr(trial, TrialKey.PIPELINE, config.to_dict())
    store.set_trial_attr(trial, TrialKey.REPEAT_OF, earlier)


def as_stored(samples_per_s: float) -> float:
    """A kept rate as the study and the note both keep it: a note is compared with the
    study's record, and the two must agree."""
    return round(samples_per_s, 2)


def record_kept(study: optuna.Study, reading: Reading) -> None:
    """The setting kept, for the next run of the job."""
    try:
        store.set_study_attr(study, StudyKey.ONLINE_KEPT, reading.settings.to_dict())
        store.set_study_attr(study, StudyKey.ONLINE_KEPT_RATE, as_stored(reading.samples_per_s))
    except Exception as exc:  # noqa: BLE001 - the training goes on, unrecorded
        not_recorded(study.study_name, exc)


def not_recorded(where: str, exc: BaseException) -> None:
    """One warning: the run goes on, unrecorded."""
    log.warning("autotune.DataLoader: not recorded: %s failed (%s)", where, first_line(exc))
