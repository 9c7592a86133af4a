"""The study in its storage: opened (created, or resumed when its workload, space, format
and kind of host match), with heartbeats, and the trials of runs and hosts that died marked
failed, never left running."""

from __future__ import annotations

import logging
import time
import warnings
import zlib
from pathlib import Path

import optuna
import sqlalchemy
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages._rdb import models  # the heartbeats' table, which Optuna reads alone
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline import best_file
from autotune.runtime.failures import Failure, FailureKind
from autotune.schema import StudyConfig
from autotune.tuner import store
from autotune.tuner.lease import this_process
from autotune.tuner.store import METRIC, STUDY_FORMAT, StudyKey, TrialKey
from autotune.tuner.ways import make_pruner

log = logging.getLogger(__name__)


def _constraints(trial: FrozenTrial) -> tuple[float]:
    return (store.trial_attr(trial, TrialKey.CONSTRAINT, 0.0),)


def lost_after_s(study_conf: StudyConfig) -> float:
    """A trial (or a lease) silent for this long belongs to a host that died."""
    return 3 * study_conf.heartbeat_s


def sqlite_file(storage: str) -> Path | None:
    """The file of an SQLite storage URL (``sqlite:///studies/autotune.db``); None for a
    server's."""
    return Path(storage.removeprefix("sqlite:///")) if storage.startswith("sqlite:///") else None


def in_memory(storage: str) -> bool:
    """Whether ``storage`` is an SQLite database in memory, which ends with its process."""
    return storage in ("sqlite://", "sqlite:///:memory:")


def located(storage: str) -> str:
    """An SQLite storage URL by its absolute path (``sqlite:////home/me/studies/autotune.db``),
    so that a file naming it leads to it from any folder; a server's URL as it is."""
    database = sqlite_file(storage)
    return storage if database is None else f"sqlite:///{database.resolve()}"


def make_room(storage: str) -> None:
    """Creates an SQLite storage's folder (``studies/``), where SQLite would not."""
    database = sqlite_file(storage)
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)


def shown(storage: str) -> str:
    """A storage URL as it may be printed or written: its password hidden."""
    try:
        return sqlalchemy.engine.make_url(storage).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return storage


def _storage(study_conf: StudyConfig) -> optuna.storages.RDBStorage:
    """The study's storage, with heartbeats: a trial running on a host that dies is failed by
    the next host that looks, after ``lost_after_s``."""
    where = f"study.storage={shown(study_conf.storage)}"
    try:
        return _open_rdb(study_conf)
    except ImportError:
        raise UsageError(
            f"{where} needs a database driver that is not installed: for PostgreSQL, "
            "pip install 'autotune[shared]'"
        ) from None
    except sqlalchemy.exc.ArgumentError:
        raise UsageError(
            f"{where} is not a database URL: use sqlite:///PATH or postgresql://USER@HOST/DB"
        ) from None
    except sqlalchemy.exc.OperationalError as exc:
        reason = str(exc.orig or exc).strip().splitlines()[0]
        raise UsageError(f"cannot open {where}: {reason}") from None


def _open_rdb(study_conf: StudyConfig, attempts: int = 5) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage. Hosts started together on a new database all create its tables
    at once, and PostgreSQL lets one of them in (the others see a duplicate type or table):
    those try again, and find the tables made."""
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(
                study_conf.storage,
                heartbeat_interval=study_conf.heartbeat_s,
                grace_period=int(lost_after_s(study_conf)),
            )
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _seed(study_conf: StudyConfig) -> int:
    """``study.seed`` for a study of one host (SQLite); hosts sharing a server's study each
    mix in their own name, or they would all draw the same random first points."""
    if study_conf.storage.startswith("sqlite"):
        return study_conf.seed
    return zlib.crc32(f"{study_conf.seed} {this_process()}".encode())


def open_study(
    study_conf: StudyConfig, fingerprint: str, facts: MachineFacts | None = None
) -> optuna.Study:
    """Creates or resumes the study; refuses to resume one whose workload or space changed,
    that an older autotune made, or (given ``facts``) that hosts of another kind measured."""
    make_room(study_conf.storage)
    # multivariate, group, constraints and metric names are "experimental" in Optuna
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=_seed(study_conf),
            n_startup_trials=study_conf.n_startup_trials,
            multivariate=True,
            group=True,  # conditional knobs (prefetch only with workers) form groups
            constraints_func=_constraints if study_conf.memory_budget_gb else None,
            constant_liar=True,  # hosts sharing the study: never the point another is running
        )
        study = optuna.create_study(
            study_name=study_conf.name,
            storage=_storage(study_conf),
            direction="maximize",
            sampler=sampler,
            pruner=make_pruner(),
            load_if_exists=True,
        )
        stored = store.study_attr(study, StudyKey.FINGERPRINT)
        if stored is None:
            store.set_study_attr(study, StudyKey.FINGERPRINT, fingerprint)
            store.set_study_attr(study, StudyKey.FORMAT, STUDY_FORMAT)
            study.set_metric_names([METRIC])
    where = f"study {study_conf.name!r} in {shown(study_conf.storage)}"
    if facts is not None:  # first: another kind of host is also another search space
        _refuse_another_kind_of_host(study, where, facts)
    if store.study_attr(study, StudyKey.FORMAT) != STUDY_FORMAT:
        raise UsageError(
            f"{where} was made by an older autotune, whose trials measured another baseline "
            "and epoch: pick a new study.name=... to start afresh"
        )
    if stored is not None and stored != fingerprint:
        raise UsageError(
            f"{where} was made with another dataset, model, recipe, window or search space: "
            "pick a new study.name=... to start afresh"
        )
    if study_conf.storage.startswith("sqlite"):
        _fail_stale(study)  # one host: we hold its lock, so no one else runs them
    fail_lost(study)
    return study


def _refuse_another_kind_of_host(study: optuna.Study, where: str, facts: MachineFacts) -> None:
    """Every host of a study is of one kind (usable CPUs, GPU model and count, torch): a
    figure from another kind would rank against figures it cannot be compared with."""
    machine = best_file.MachineSection.from_dict(store.study_attr(study, StudyKey.MACHINE))
    if machine is None:
        store.set_study_attr(study, StudyKey.MACHINE, best_file.MachineSection.of(facts).to_dict())
        return
    differences = best_file.machine_differences(machine, facts)
    if differences:
        raise UsageError(
            f"{where} is measured on other hosts ({'; '.join(differences)}): run it on a host "
            "like theirs, or pick a new study.name=... for this one"
        )


def add_trial(study: optuna.Study, trial: FrozenTrial) -> int:
    """``study.add_trial(trial)``, and the number the study gave it (Optuna's says none)."""
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=trial)
    return study._storage.get_trial_number_from_id(trial_id)


def mark_failed(study: optuna.Study, trial_id: int, failure: Failure) -> bool:
    """Records ``failure`` on a running trial and fails it; False where another process got
    there first."""
    try:
        study._storage.set_trial_user_attr(trial_id, TrialKey.FAILURE, failure.to_dict())
        return study._storage.set_trial_state_values(trial_id, TrialState.FAIL)
    except UpdateFinishedTrialError:
        return False


def _fail_stale(study: optuna.Study) -> None:
    """Trials left RUNNING by a run that was killed outright are marked failed, with the
    reason."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if mark_failed(
            study, t._trial_id, Failure(FailureKind.ERROR, "the run measuring it was killed")
        ):
            log.warning("trial %d was left running by a killed run: marked failed", t.number)


def fail_lost(study: optuna.Study, silent_since: dict[int, float] | None = None) -> None:
    """Trials whose host stopped sending heartbeats (it died) are marked failed, with the
    reason: none stays RUNNING forever, and none is counted twice. Given ``silent_since``
    (kept by a caller that looks again and again), also a trial that never sent one: its
    host died between creating it and its first heartbeat, which Optuna's check never
    finds. It is failed once this host has seen it silent for the grace period, by this
    host's own clock (the hosts' clocks may disagree)."""
    storage = study._storage
    stopped = "the host measuring it stopped sending heartbeats"  # Optuna's check finds it
    lost = dict.fromkeys(storage._get_stale_trial_ids(study._study_id), stopped)
    if silent_since is not None:
        rdb = getattr(storage, "_backend", storage)  # Optuna wraps it in a cache
        now, silent = time.monotonic(), _never_beat(rdb, study._study_id)
        for trial_id in set(silent_since) - silent:  # it beat, or it ended
            del silent_since[trial_id]
        for trial_id in silent:
            if now - silent_since.setdefault(trial_id, now) > rdb.grace_period:
                lost[trial_id] = "the host measuring it never sent a heartbeat"
    for trial_id, reason in sorted(lost.items()):
        number = storage.get_trial_number_from_id(trial_id)
        if mark_failed(study, trial_id, Failure(FailureKind.HOST_LOST, reason)):
            log.warning("trial %d: %s; marked failed", number, reason)


def _never_beat(storage: optuna.storages.RDBStorage, study_id: int) -> set[int]:
    """The study's running trials with no heartbeat recorded yet (Optuna's own tables)."""
    trials = models.TrialModel.__table__
    beats = models.TrialHeartbeatModel.__table__
    query = (
        sqlalchemy.select(trials.c.trial_id)
        .outerjoin(beats, beats.c.trial_id == trials.c.trial_id)
        .where(trials.c.study_id == study_id, trials.c.state == TrialState.RUNNING)
        .where(beats.c.trial_id.is_(None))
    )
    with storage.engine.connect() as conn:
        return set(conn.execute(query).scalars())
