"""Where autotune.DataLoader records what it explored: no trial is left running, whether the
run stops while measuring (the loop left, Ctrl-C) or is killed outright."""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import optuna
import pytest
import torch
from helpers import BRIEF_WINDOW
from optuna.trial import TrialState

import autotune
from autotune.machine import detect
from autotune.online import drift, job_record, made_anew, note, record
from autotune.online.budget import charged
from autotune.online.proposals import sampler
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig
from autotune.report import markdown
from autotune.runtime.failures import FailureKind
from autotune.tuner import store
from autotune.tuner.result import StudyResult
from autotune.tuner.store import StudyKey, TrialKey

# each runs a real loop into a real study, one kills a process: seconds each
pytestmark = pytest.mark.slow

DATA = torch.utils.data.TensorDataset(torch.arange(64))


class Paced(torch.utils.data.Dataset):
    """Samples each taking ``seconds`` to read: a loop whose rate a second run reads again
    (a loop of microseconds reads 1.5x apart from run to run on a busy machine)."""

    def __init__(self, count: int = 64, seconds: float = 0.001) -> None:
        self.count, self.seconds = count, seconds

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor]:  # as a TensorDataset's
        time.sleep(self.seconds)
        return (torch.tensor(index),)


def _slow_start(worker_id: int) -> None:
    time.sleep(0.3)


def _epochs_until(loader: autotune.DataLoader, done: Callable[[], bool], epochs: int) -> None:
    """Whole epochs of ``loader``, each index read once, until ``done()``: at most
    ``epochs``."""
    for _ in range(epochs):
        if done():
            return
        count = len(loader.dataset)  # type: ignore[arg-type]
        assert sorted(i for (b,) in loader for i in b.tolist()) == list(range(count))
    assert done(), f"not done in {epochs} epochs"


def _note_kept(loader: autotune.DataLoader, storage: str, kept: note.Kept) -> None:
    """``kept``, noted for ``loader``'s job as an earlier run would have."""
    job = job_record.job_fingerprint(loader, detect(want_cuda=torch.cuda.is_available()))
    note.write(storage, job_record.study_name(loader, job), job, kept)


def trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage).trials


def test_a_run_stopped_while_measuring_leaves_no_trial_running(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    # a budget of many epochs: these epochs of 16 bare indices take milliseconds
    loader = autotune.DataLoader(
        DATA, batch_size=4, tune=1000.0, window=BRIEF_WINDOW, storage=storage
    )
    batches = iter(loader)
    while loader.explorer is None:  # the run's own settings measured: the next one asked
        next(batches)
    asked = loader.explorer.current  # the guides' setting, queued by the run: being measured
    del batches, loader  # the loop left: the loader is collected, the process going on
    gc.collect()  # what it measured: left for the job's next loader in the process
    assert not [t for t in trials(storage) if t.state == TrialState.FAIL]
    made_anew._ended()  # the process exits, and none came
    assert not [t for t in trials(storage) if t.state == TrialState.RUNNING]
    (stopped,) = [t for t in trials(storage) if t.state == TrialState.FAIL]
    assert store.failure_kind(stopped) == FailureKind.INTERRUPTED
    assert store.is_interrupted(stopped)  # it measured nothing
    assert store.setting_of(stopped, "num_workers") == asked.num_workers


def test_a_trial_left_running_by_a_killed_run_is_failed_at_the_next_open(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    study = record.open_record(storage, "online-job", "fp", sampler())
    assert study is not None
    # another run of the job asks a setting to measure (as record_asked names it), and is
    # killed outright: no exit handler runs (the child stays light: Optuna, not torch)
    asks = (
        "import sys, time, optuna\n"
        "from autotune.tuner.lease import this_process\n"
        "study = optuna.load_study(study_name='online-job', storage=sys.argv[1])\n"
        "study.ask().set_user_attr(sys.argv[2], this_process())\n"
        "print('asked', flush=True)\n"
        "time.sleep(600)\n"
    )
    argv = [sys.executable, "-c", asks, storage, TrialKey.HOST]
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None and run.stdout.readline() == "asked\n"
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    record.record_asked(study.ask())  # this process's own, still measuring: left as it is
    assert record.open_record(storage, "online-job", "fp", sampler()) is not None
    killed, alive = trials(storage)
    assert killed.state == TrialState.FAIL
    assert store.failure_kind(killed) == FailureKind.INTERRUPTED
    assert alive.state == TrialState.RUNNING


def test_its_study_s_report_says_what_it_kept(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    window = BRIEF_WINDOW
    loader = autotune.DataLoader(DATA, batch_size=4, tune=0.5, window=window, storage=storage)
    for _ in range(20):  # until the budget is spent and a setting kept
        sum(1 for _ in loader)
        if loader.explorer is not None and loader.explorer.done:
            break
    (summary,) = optuna.get_all_study_summaries(storage)
    markdown.write_report(storage, summary.study_name, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    kept = loader.explorer.current  # read with from the next batch, or the next epoch
    assert f"`autotune.DataLoader` kept `{kept.short()}` at " in text
    assert "stopped before naming a best config" not in text
    study = loader.explorer.study
    result = StudyResult.load(study, storage=storage)  # the settings that mattered: the kept's
    assert result.best_params == study.trials[loader.explorer.proposals.trial_of(kept)].params
    assert result.best_params and result.best is None  # no confirmed winner: none named one
    # and noted on this host, where the next run starts before its first batch
    # with the rate it was kept at: a next run far off it is not this job (``DriftWatch``)
    rate = store.study_attr(loader.explorer.study, StudyKey.ONLINE_KEPT_RATE)
    job_record = loader.tuning.start.job
    assert job_record is not None and note.read(*job_record.job) == (kept, rate) and rate > 0


def test_with_no_setting_kept_a_run_starts_at_the_newest_offline_pick_for_its_loader(
    tmp_path, caplog
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"

    def loader() -> autotune.DataLoader:  # its own settings: w0; a rate steady between runs
        return autotune.DataLoader(Paced(), batch_size=4, storage=storage, window=BRIEF_WINDOW)

    facts = detect(want_cuda=torch.cuda.is_available())
    job = job_record.job_fingerprint(loader(), facts)
    pick = PipelineConfig(  # the pipeline as it is, of the loader's batch size
        decoder="as_is", batch_size=4, num_workers=2, prefetch_factor=3, persistent_workers=True
    )
    for name, offered_job, settings, at in (
        ("older", job, PipelineConfig(num_workers=2), "2026-12-01T10:00:00+00:00"),
        ("newer", job, pick, "2026-12-02T10:00:00+00:00"),
        ("another loader's", "xyz", PipelineConfig(num_workers=3), "2026-12-03T10:00:00+00:00"),
    ):
        study = optuna.create_study(storage=storage, study_name=name)
        offered = {"job": offered_job, "settings": settings.to_dict(), "at": at}
        store.set_study_attr(study, StudyKey.ONLINE_START, offered)
    first = loader()
    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        assert sorted(i for (batch,) in first for i in batch.tolist()) == list(range(64))
    starts_at = first.settings
    assert starts_at.num_workers == 2 and starts_at.prefetch_factor == 3
    assert starts_at.persistent_workers
    assert first.switches == [] and first.explorer is None  # it explores nothing
    assert f"{starts_at.short()}, as the offline study newer picked" in caplog.text
    # the run's own study records no trial; the pick is noted where the next run starts
    assert not optuna.load_study(
        study_name=first.tuning.start.job.job.name, storage=storage
    ).trials
    _epochs_until(first, lambda: bool(first.readings), epochs=20)  # the run has read the pick
    assert first.explorer is None and not first.switches
    # then kept at the rate this run read it at, over whole epochs (each epoch's start
    # charged: till one is read, a worker's batch): a later run far off it is another job
    rate = round(charged(first.readings[0], {}, len(first)).samples_per_s, 2)
    assert rate < round(first.readings[0].samples_per_s, 2)
    study = optuna.load_study(study_name=first.tuning.start.job.job.name, storage=storage)
    assert store.study_attr(study, StudyKey.ONLINE_KEPT) == pick.to_dict()
    assert store.study_attr(study, StudyKey.ONLINE_KEPT_RATE) == rate
    assert note.read(*first.tuning.start.job.job) == (pick, rate) and not study.trials
    markdown.write_report(storage, study.study_name, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"kept `{pick.short()}` at {rate:.1f} samples/s" in text
    assert "the setting the run started at (its own, or an offline study's pick)" in text
    second = loader()
    sum(1 for _ in second)
    assert second.settings == starts_at and second.tuning.start.job.study is None  # from the note


def test_points_an_earlier_run_queued_and_never_asked_are_failed_at_the_next_open(
    tmp_path,
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    study = record.open_record(storage, "online-job", "fp", sampler())
    assert study is not None
    store.enqueue(study, {"num_workers": 1}, {})  # a prior the run ended before asking
    assert record.open_record(storage, "online-job", "fp", sampler()) is not None
    (left,) = trials(storage)
    assert left.state == TrialState.FAIL  # not this run's first ask
    assert store.failure_kind(left) == FailureKind.INTERRUPTED


def test_a_kept_setting_this_autotune_cannot_read_is_one_warning_and_the_run_explores(
    tmp_path, caplog
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    loader = autotune.DataLoader(DATA, batch_size=4, storage=storage)
    job = job_record.job_fingerprint(loader, detect(want_cuda=torch.cuda.is_available()))
    study = record.open_record(storage, job_record.study_name(loader, job), job, sampler())
    newer = PipelineConfig().to_dict()
    newer["loader"]["worker_affinity"] = "numa"  # a knob of a newer autotune's
    store.set_study_attr(study, StudyKey.ONLINE_KEPT, newer)
    with caplog.at_level(logging.WARNING, logger="autotune"):
        assert sum(len(b) for (b,) in loader) == 64
    assert "not recorded" in caplog.text and "worker_affinity" in caplog.text


def test_a_kept_setting_whose_workers_start_each_epoch_is_read_as_it_was_kept(
    tmp_path, caplog
) -> None:
    """The explorer keeps a setting's rate over whole epochs, each charging its workers' start
    where they do not persist (``budget.charged``); a later run reads it so too, and is not
    taken for another job because its workers start slowly."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    data = torch.utils.data.TensorDataset(torch.arange(128))

    def loader(tune: bool) -> autotune.DataLoader:  # w2, started again each epoch: 0.3 s
        return autotune.DataLoader(
            data, batch_size=4, num_workers=2, worker_init_fn=_slow_start, tune=tune,
            storage=storage, window=BRIEF_WINDOW,
        )  # fmt: skip

    read = loader(tune=False)
    _epochs_until(read, lambda: bool(read.readings), epochs=10)
    kept = charged(read.readings[0], {}, len(read))  # as the explorer keeps it
    assert kept.samples_per_s * 1.5 < read.readings[0].samples_per_s  # the start weighs
    again = loader(tune=True)
    _note_kept(again, storage, note.Kept(again.settings, kept.samples_per_s))
    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        _epochs_until(again, lambda: bool(again.readings), epochs=10)
    assert again.explorer is None and "exploring" not in caplog.text


def test_a_run_far_off_the_rate_its_setting_was_kept_at_explores_again(tmp_path, caplog) -> None:
    """The rate kept with the setting and the run's first readings: a loop a hundred times
    slower than the one the setting was kept on (another transform, model or step, which the
    fingerprint cannot see) explores again once readings off it span the drift's time; a
    run at the rate it was kept at explores nothing."""
    window = dataclasses.replace(BRIEF_WINDOW, batches_per_window=8)  # readings of 0.3 s
    paced = Paced(128, 0.005)

    def run_from(storage: str, rate: float, readings: int) -> autotune.DataLoader:
        loader = autotune.DataLoader(paced, batch_size=4, storage=storage, window=window)
        _note_kept(loader, storage, note.Kept(loader.settings, rate))  # its own: w0

        def done() -> bool:
            return loader.explorer is not None or len(loader.readings) >= readings

        _epochs_until(loader, done, epochs=30)
        return loader

    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        far_off = run_from(f"sqlite:///{tmp_path}/a.db", 100 * 10**6, readings=30)
        assert far_off.explorer is not None  # the study opened, the run's reading its first
        assert "kept at 100000000 by an earlier run; exploring" in caplog.text
        caplog.clear()
        rate = far_off.readings[0].samples_per_s  # no workers to charge: as it would be kept
        again = run_from(f"sqlite:///{tmp_path}/b.db", rate, readings=drift.SUSTAINED * 2)
        assert again.explorer is None and len(again.readings) >= drift.SUSTAINED * 2
    assert "exploring" not in caplog.text


class _DiesInWorkers(torch.utils.data.Dataset):
    """Reads in the training process; a worker reading it really dies (as the OOM killer
    takes it): a setting kept on another day, with more memory, that fails here."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> tuple[torch.Tensor]:
        if torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return (torch.tensor(index),)


@pytest.mark.parametrize("where", ["note", "study"])
def test_a_kept_setting_whose_workers_fail_falls_back_to_yours_and_is_kept_no_more(
    tmp_path, where
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"

    def run() -> autotune.DataLoader:
        return autotune.DataLoader(
            _DiesInWorkers(), batch_size=4, window=BRIEF_WINDOW, storage=storage
        )

    first = run()
    kept = dataclasses.replace(first.settings, num_workers=2, prefetch_factor=2)
    fingerprint = job_record.job_fingerprint(first, detect(want_cuda=torch.cuda.is_available()))
    job = job_record.Job(storage, job_record.study_name(first, fingerprint), fingerprint)
    if where == "note":
        _note_kept(first, storage, note.Kept(kept, 500.0))
    study = record.open_record(*job, sampler())
    store.set_study_attr(study, StudyKey.ONLINE_KEPT, kept.to_dict())
    store.set_study_attr(study, StudyKey.ONLINE_KEPT_RATE, 500.0)
    # torch's loader with your arguments (no workers) reads every epoch: so does this run
    _epochs_until(first, lambda: first.explorer is not None, epochs=5)
    assert first.switches and first.switches[-1].settings == first.own  # fell back
    assert first.switches[-1].fell_back and first.tuning.start.origin.startswith("your")
    noted, stored = note.read(*job), record.kept(record.open_record(*job, sampler()))
    assert kept not in {noted and noted.settings, stored and stored.settings}
    again = run()  # starts where this run left: never at the setting that failed
    sum(1 for _ in again)
    assert not any(s.settings == kept for s in again.switches)


def test_a_study_name_given_to_two_jobs_never_starts_one_at_the_other_s_setting(
    tmp_path, caplog
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    first = record.open_record(storage, "mine", "job-a", sampler())
    assert first is not None
    record.record_kept(first, Reading(PipelineConfig(num_workers=2), 500.0, 0.0, 0.0, 0.0, 1, 1.0))
    assert record.kept(record.open_record(storage, "mine", "job-a", sampler())) is not None
    with caplog.at_level(logging.WARNING, logger="autotune.online.loader"):
        other = record.open_record(storage, "mine", "job-b", sampler())
    assert record.kept(other) is None  # job b explores afresh
    assert "held another job's setting" in caplog.text and "study= of its own" in caplog.text
