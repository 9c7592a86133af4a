"""Where ``autotune.DataLoader`` keeps what it explored: an Optuna study in the study storage
(``sqlite:///studies/autotune.db`` by default, as the command's), one per job (named by the
job's fingerprint: ``job_record``). Each setting explored is a trial with the tuner's trial
attributes; the setting kept is a study attribute, where a later run of the same job starts,
exploring nothing unless its rate moves.

A storage that cannot be opened or written never stops the training: one warning, and the
run goes on unrecorded.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.online import note
from autotune.online.note import Kept
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure, FailureKind, first_line
from autotune.tuner import storage as study_storage
from autotune.tuner import store
from autotune.tuner.lease import is_gone, this_process
from autotune.tuner.store import StudyKey, TrialKey

log = logging.getLogger("autotune.online.loader")

DEFAULT_STORAGE = "sqlite:///studies/autotune.db"
STOPPED = Failure(FailureKind.INTERRUPTED, "the run stopped while measuring it")
# the loader collected mid-run, the loop reading on: with another loader, made anew
ABANDONED = Failure(FailureKind.ABANDONED, "the loader was collected while measuring it")
# queued by an earlier run that ended before asking for it, in a space this run's is not
# (sized by another machine, or by reads that waited there)
UNASKED = Failure(FailureKind.INTERRUPTED, "queued by an earlier run that ended before asking it")
OUTSIDE = Failure(FailureKind.INVALID_CONFIG, "queued by an earlier run, outside this run's space")
# the loop changes its Dataset between epochs (``dataset_state``): a copy kept alive goes stale
RENEWED = Failure(
    FailureKind.INVALID_CONFIG,
    "the loop changes its Dataset between epochs, which workers that persist would not see",
)


def untimeable(batches_per_epoch: int, left_after: int = 0, between_pauses: int = 0) -> Failure:
    """A setting a whole epoch (or, where the loop leaves its epochs early, a pass of
    ``left_after`` batches; where it pauses often, the batches between two pauses) could not
    time."""
    longer = f"an epoch of {batches_per_epoch} batches"
    if left_after and left_after != batches_per_epoch:  # its last step is never timed
        longer = f"the {left_after} batches your loop reads of an epoch before it leaves"
    if 0 < between_pauses < batches_per_epoch:  # a warm-up begins after each pause
        longer = (
            f"the {between_pauses} batches your loop reads between its pauses (a save, a "
            "validation: each one's time is the loop's, and the loader warms up after it)"
        )
    why = f"its warm-up and one sub-window are longer than {longer}"
    return Failure(FailureKind.UNTIMEABLE, f"could not be timed on this run: {why}")


def over_budget(start_s: float, left_s: float) -> Failure:
    """A setting whose workers' start, predicted from those seen, exploring could not pay
    when the sampler asked for it: asked again once the budget has grown."""
    return Failure(
        FailureKind.OVER_BUDGET,
        f"its workers' start (about {start_s:.1f} s, from the starts seen on this run) and "
        f"its shortest timing are more than exploring had left ({max(left_s, 0.0):.1f} s)",
    )


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
        _claim(study, fingerprint)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if is_gone(store.trial_attr(trial, TrialKey.HOST, "")):
                study_storage.mark_failed(study, trial._trial_id, STOPPED)
        # queued by an earlier build's run (this one queues its points in the run): never
        # this run's first ask, which Optuna would take them for
        for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            study_storage.mark_failed(study, trial._trial_id, UNASKED)
        return study
    except Exception as exc:  # noqa: BLE001 - the training goes on, unrecorded
        not_recorded(storage, exc)
        return None


def _claim(study: optuna.Study, fingerprint: str) -> None:
    """The study is this job's: a setting another job kept in it (a ``study=`` name given to
    two jobs) is no start for this one, and is dropped with one warning."""
    earlier = store.study_attr(study, StudyKey.FINGERPRINT)
    if earlier not in (None, fingerprint) and store.study_attr(study, StudyKey.ONLINE_KEPT):
        log.warning(
            "autotune.DataLoader: study %s held another job's setting (fingerprint %s, this "
            "job's %s): explored afresh; give each job a study= of its own",
            study.study_name, earlier, fingerprint,
        )  # fmt: skip
        drop_kept(study)
    store.set_study_attr(study, StudyKey.FINGERPRINT, fingerprint)


def drop_kept(study: optuna.Study) -> None:
    """No setting kept in ``study`` from here: the next run of its job explores."""
    for key in (StudyKey.ONLINE_KEPT, StudyKey.ONLINE_KEPT_RATE):
        store.set_study_attr(study, key, None)


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


def record_asked(trial: optuna.Trial) -> None:
    """A setting about to be measured: by this process (a run killed outright leaves its
    trial running; the next run of the job marks it failed)."""
    store.set_trial_attr(trial, TrialKey.HOST, this_process())


def record_failed(trial: optuna.Trial, failure: Failure) -> None:
    """Why a setting explored failed (its workers, or no epoch could time it)."""
    store.set_trial_attr(trial, TrialKey.FAILURE, failure.to_dict())


def record_stopped(study: optuna.Study, trial: optuna.Trial, why: Failure = STOPPED) -> None:
    """The run stopped while measuring ``trial`` (Ctrl-C; ``why``: the loader was collected
    mid-run): failed, with why."""
    try:
        record_failed(trial, why)
        study.tell(trial, state=TrialState.FAIL)
    except Exception as exc:  # noqa: BLE001 - at exit: one warning, never a traceback
        not_recorded(study.study_name, exc)


def record_trial(trial: optuna.Trial, reading: Reading) -> None:
    """A setting explored, with the tuner's names for what was measured."""
    for key, value in _measured(reading).items():
        store.set_trial_attr(trial, key, value)


def unasked_trial(
    params: dict[str, Any],
    distributions: dict[str, Any],
    reading: Reading | None,
    failure: Failure | None = None,
    look_of: int | None = None,
) -> FrozenTrial:
    """A point the run measured without asking the sampler (its own queue: its start, the
    guides', a second look of trial ``look_of``), as a trial once it is read: what it
    measured, or why it failed."""
    attrs: dict[str, Any] = {TrialKey.HOST: this_process()}
    attrs.update(_measured(reading) if reading is not None else {})
    attrs.update({TrialKey.FAILURE: failure.to_dict()} if failure is not None else {})
    attrs.update({TrialKey.LOOK_OF: look_of} if look_of is not None else {})
    value = reading.samples_per_s if reading is not None else None
    return store.finished_trial(params, distributions, attrs, value)


def _measured(reading: Reading) -> dict[str, Any]:
    """What a reading measured, by the tuner's names."""
    attrs: dict[str, Any] = {
        TrialKey.CONFIG: reading.settings.short(),
        TrialKey.PIPELINE: reading.settings.to_dict(),
        TrialKey.SPREAD: round(reading.spread, 4),
        TrialKey.DATA_WAIT: round(reading.data_wait, 4),
        TrialKey.TIME_TO_FIRST_BATCH: round(reading.first_batch_s, 4),
    }
    if reading.epoch_start_s:  # an epoch began while it was read: its first batch's wait
        attrs[TrialKey.EPOCH_START] = round(reading.epoch_start_s, 4)
    if reading.beaten_after:  # clearly below the best so far, as the study prunes a trial
        attrs[TrialKey.PRUNED_AFTER] = reading.beaten_after
    return attrs


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
