"""Tests for autotune.online.explorer and its use by autotune.DataLoader: the run's own
settings first, the sampler's proposals while the budget lasts, nothing measured twice, the
fastest kept; and on a real loop, exploring loses and repeats no sample."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import torch
from helpers import BRIEF_WINDOW
from test_loader_cpu import Waits
from test_online_loader import Stream
from torch.utils.data import Dataset, IterableDataset, get_worker_info

import autotune
from autotune.machine import detect
from autotune.online import explorer as explorer_module
from autotune.online.admission import WorkerStarts
from autotune.online.drift import SUSTAINED
from autotune.online.explorer import Explorer
from autotune.online.passes import Passes
from autotune.online.reading import Reading
from autotune.online.space import online_space
from autotune.online.sub_window import fewest_batches
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.runtime.failures import FailureKind
from autotune.session.space import SearchSpace
from autotune.tuner import storage as study_storage
from autotune.tuner import store, study_trials
from autotune.tuner.store import StudyKey, TrialKey

START = PipelineConfig(decoder=AS_IS)  # torch's defaults: no workers
FACTS = detect(want_cuda=False)


def reading(settings: PipelineConfig, rate: float, seconds: float = 1.0) -> Reading:
    return Reading(settings, rate, 0.02, 0.5, 0.01, batches=10, seconds=seconds)


def rate_of(settings: PipelineConfig) -> float:
    """A machine where workers help and deep prefetch helps a little."""
    return 100.0 + 50.0 * settings.num_workers + (settings.prefetch_factor or 0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def explore(explorer: Explorer, clock: Clock, limit: int = 200) -> list[PipelineConfig]:
    tried = []
    while not explorer.done and len(tried) < limit:
        tried.append(explorer.current)
        clock.now += 1.0
        explorer.measured(reading(explorer.current, rate_of(explorer.current)))
    return tried


def test_with_budget_left_it_measures_each_point_once_and_keeps_the_fastest() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    # 1 s a setting, a first epoch of 10 000 s: the budget never runs out here
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=100_000, clock=clock)
    tried = explore(explorer, clock)
    assert tried[0] == START  # the run's own settings first
    assert len(tried) == len(set(tried))  # nothing measured twice
    assert explorer.done and explorer.current == explorer.best.settings  # type: ignore[union-attr]
    assert explorer.current == max(tried, key=rate_of)


def test_an_explorer_made_after_the_loop_changed_its_dataset_measures_no_kept_workers() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    explorer = Explorer(
        space, START, share=1.0, batches_per_epoch=100_000, clock=clock, persist_refused=True
    )
    tried = explore(explorer, clock)
    assert len(tried) > 2 and not any(s.persistent_workers for s in tried)
    study = explorer.study
    refused = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert refused and all(t.params.get("persistent_workers") for t in refused)


def test_the_budget_ends_exploring_at_a_share_of_the_first_epoch() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    # the first reading: 10 batches in 1 s; an epoch of 100 batches is 10 s; a share of
    # 0.5 is 5 s of exploring, each setting taking 1 s
    explorer = Explorer(space, START, share=0.5, batches_per_epoch=100, clock=clock)
    tried = explore(explorer, clock)
    assert 4 <= len(tried) <= 6
    assert explorer.current == max(tried, key=rate_of)


def test_once_a_faster_setting_is_found_an_epoch_of_it_is_what_exploring_may_spend() -> None:
    """The run's own settings read 10 batches/s (an epoch of 100 batches: 10 s), every
    setting with workers 50 a second (2 s); each setting timed for 1 s. Exploring stops once
    it has spent an epoch at the best rate, not 10 s of settings near it."""
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=100, clock=clock)
    tried = []
    while not explorer.done:
        tried.append(settings := explorer.current)
        clock.now += 1.0
        batches = 50 if settings.num_workers else 10
        explorer.measured(Reading(settings, 4.0 * batches, 0.02, 0.5, 0.01, batches, 1.0))
    assert tried[0] == START and len(tried) == 1 + 2  # its own, then 2 s of proposals


def test_the_guides_setting_comes_right_after_the_run_s_own() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    own = PipelineConfig(decoder=AS_IS, batch_size=4, main_threads=1)  # a point of the space
    explorer = Explorer(space, own, share=1.0, batches_per_epoch=100_000, clock=Clock())
    explorer.measured(reading(own, 100.0))
    first = explorer.current  # a worker per usable CPU, kept alive, one thread
    assert first.num_workers == max(space.choices("num_workers")) == FACTS.usable_cpus
    assert (first.prefetch_factor, first.persistent_workers, first.main_threads) == (2, True, 1)


@pytest.mark.parametrize("initialized", [False, True])
def test_pin_memory_is_offered_only_to_a_loop_that_trains_on_cuda(initialized, monkeypatch):
    # a GPU host: a loop that trains on it has initialized CUDA by its first batches; a loop
    # that trains on the CPU never does, and pinning its batches would only cost it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
    first = reading(START, 100.0)
    explorer = Explorer.on_run(
        FACTS, first, batch_size=4, ranks=1, window=BRIEF_WINDOW, share=0.1, batches_per_epoch=100
    )
    assert ("pin_memory" in {k.name for k in explorer.space.knobs}) == initialized


def test_a_failed_setting_is_never_kept() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=100_000, clock=clock)
    explorer.measured(reading(START, 100.0))
    failing = explorer.current
    explorer.failed()
    explore(explorer, clock)
    assert explorer.current != failing


def test_a_kept_setting_whose_workers_fail_gives_way_to_the_next_fastest_for_good() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=100_000, clock=clock)
    tried = explore(explorer, clock)
    kept = explorer.current
    runner_up = sorted(set(tried) - {kept}, key=rate_of)[-1]
    assert explorer.failed() == runner_up == explorer.current  # killed, out of memory
    assert explorer.best is not None and explorer.best.settings == runner_up
    # never the failed one again: told as failed, however fast it read
    assert explorer.failed() != kept and explorer.current != kept


def test_workers_started_again_each_epoch_lose_to_kept_ones_that_read_a_little_slower() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=20, clock=clock)

    def read(settings: PipelineConfig) -> Reading:
        # steady: 5 % faster without persistence; 1 s to start its workers, on 2 s epochs
        restart = 0.0 if settings.persistent_workers or not settings.num_workers else 1.0
        rate = rate_of(settings) * (1.0 if settings.persistent_workers else 1.05)
        return Reading(settings, rate, 0.02, 0.1, 0.1 + restart, batches=10, seconds=1.0)

    while not explorer.done:
        clock.now += 1.0
        explorer.measured(read(explorer.current))
    assert explorer.current.persistent_workers


class Work(Dataset):
    """Each sample some real CPU work: workers take it off the loop."""

    def __len__(self) -> int:
        return 192

    def __getitem__(self, index: int) -> torch.Tensor:
        x = torch.full((64, 64), float(index))
        for _ in range(20):
            x = torch.tanh(x @ torch.eye(64))
        return torch.tensor(index)


class WorkStream(IterableDataset):
    """Work's samples as a stream with no length, each worker its own share."""

    def __iter__(self):
        info = get_worker_info()
        share, of = (info.id, info.num_workers) if info else (0, 1)
        return (Work()[i] for i in range(share, len(Work()), of))


@pytest.mark.slow  # workers of a few settings, an epoch each: seconds
def test_a_stream_explores_one_setting_an_epoch_and_reads_each_sample_once_an_epoch(
    tmp_path,
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    loader = autotune.DataLoader(
        WorkStream(), batch_size=4, tune=3.0, window=BRIEF_WINDOW, storage=storage
    )
    ran = []
    for _ in range(7):
        assert sorted(i for batch in loader for i in batch.tolist()) == list(range(len(Work())))
        ran.append(loader.settings)
    assert loader.switches and all(s.at_batch == 0 for s in loader.switches)  # at epochs' starts
    assert [s.epoch for s in loader.switches] == sorted({s.epoch for s in loader.switches})
    explorer = loader.explorer
    assert explorer is not None and explorer.done and loader.settings == explorer.best.settings  # type: ignore[union-attr]
    tried = {r.settings for r in loader.readings}
    assert 2 <= len(tried) <= 4  # the run's own, then up to three epochs' time of proposals
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    # each setting read is a trial; a repeat proposed or a second look adds no setting
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert {store.pipeline_of(t) for t in study_trials.measured(complete)} == tried


@pytest.mark.slow  # workers of a proposal: seconds
def test_a_stream_whose_epochs_are_shorter_than_a_sub_window_at_its_rate_is_tuned(
    tmp_path, caplog
) -> None:
    """13 batches of trivial samples an epoch: the default window's sub-windows, sized from
    the rate, are far longer. The stream's length, learned as its first epoch ends, sizes
    them to fit; the setting read on used to be failed as untimeable there, and nothing was
    tuned."""
    caplog.set_level(logging.INFO, logger="autotune")
    storage = f"sqlite:///{tmp_path}/autotune.db"
    loader = autotune.DataLoader(Stream(), batch_size=4, storage=storage)  # 50 samples
    for _ in range(3):
        sum(1 for _ in loader)
    assert "could not be timed" not in caplog.text and loader.tuning.share  # type: ignore[union-attr]
    assert loader.readings and loader.explorer is not None


class WholeStream(IterableDataset):
    """Work's samples as a stream that does not split by worker: each would read them all."""

    def __iter__(self):
        return (Work()[i] for i in range(len(Work())))


@pytest.mark.slow  # a few settings, an epoch each: seconds
def test_a_stream_that_does_not_split_by_worker_is_never_read_by_more_than_one(
    tmp_path, caplog
) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    loader = autotune.DataLoader(
        WholeStream(), batch_size=4, tune=3.0, window=BRIEF_WINDOW, storage=storage
    )
    with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
        for _ in range(6):  # each sample once an epoch: none read by two workers
            read = sorted(i for batch in loader for i in batch.tolist())
            assert read == list(range(len(Work())))
    assert "WholeStream was not seen asking get_worker_info() as it starts" in caplog.text
    assert loader.explorer is not None and len({r.settings for r in loader.readings}) >= 2
    assert {r.settings.num_workers for r in loader.readings} == {0, 1}  # explored, within one


@pytest.mark.slow  # workers of up to four settings, eight epochs: seconds
def test_exploring_on_a_real_loop_loses_nothing_and_keeps_the_fastest(
    tmp_path, monkeypatch
) -> None:
    def make(cls: type, **extra) -> torch.utils.data.DataLoader:
        generator = torch.Generator().manual_seed(3)
        return cls(Work(), batch_size=4, shuffle=True, generator=generator, **extra)

    reference = make(torch.utils.data.DataLoader)
    expected = [[b.tolist() for b in reference] for _ in range(8)]
    # exploring for up to three epochs' time at the first setting's rate
    storage = f"sqlite:///{tmp_path}/autotune.db"
    loader = make(autotune.DataLoader, tune=3.0, window=BRIEF_WINDOW, storage=storage)
    got = [[b.tolist() for b in loader] for _ in range(8)]
    assert got == expected  # every epoch torch's batches, in torch's order
    explorer = loader.explorer
    assert explorer is not None and explorer.done
    measured = {r.settings for r in loader.readings}
    assert len(measured) >= 2  # the run's own, and what the sampler proposed
    assert loader.settings == explorer.best.settings  # type: ignore[union-attr]

    # recorded: each setting a trial with the tuner's attributes, and the one kept
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.study_name.startswith("online-work-")
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) >= 2 and all(TrialKey.PIPELINE in t.user_attrs for t in complete), [
        (t.state, t.user_attrs, t.value) for t in study.trials
    ]
    assert PipelineConfig.from_dict(study.user_attrs[StudyKey.ONLINE_KEPT]) == loader.settings

    # the next run of the same job starts there, exploring nothing
    again = make(autotune.DataLoader, tune=3.0, window=BRIEF_WINDOW, storage=storage)
    assert [[b.tolist() for b in again]] == expected[:1]
    assert again.settings == loader.settings and not again.switches
    assert again.explorer is None
    monkeypatch.setenv("AUTOTUNE", "off")  # a reproducible run: the kept setting, as it is
    off = make(autotune.DataLoader, window=BRIEF_WINDOW, storage=storage)
    assert next(iter(off)) is not None and off.settings == loader.settings


class SlowInWorkers(Dataset):
    """Items that take 1 ms in the training process, and in a worker 10 ms for each worker
    there is: settings with workers all read ten times slower than the run's own ``w0``."""

    def __len__(self) -> int:
        return 192

    def __getitem__(self, index: int) -> torch.Tensor:
        info = get_worker_info()
        time.sleep(0.001 if info is None else 0.01 * info.num_workers)
        return torch.tensor(index)


@pytest.mark.slow  # workers of a few settings: seconds
def test_a_proposal_clearly_below_the_best_so_far_stops_after_two_sub_windows(tmp_path) -> None:
    """Where the run's own settings read fastest, each proposal with workers reads clearly
    below them (``tuner.ways.beaten``) and stops after two of its three sub-windows, recorded
    as the study records a pruned trial; the run's own is timed in full (no worker helps)."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    window = dataclasses.replace(BRIEF_WINDOW, sub_windows=3)
    loader = autotune.DataLoader(
        SlowInWorkers(), batch_size=4, tune=10.0, window=window, storage=storage
    )
    for _ in range(4):
        assert sorted(i for batch in loader for i in batch.tolist()) == list(range(192))
    with_workers = [r for r in loader.readings if r.settings.num_workers]
    assert with_workers and all(r.beaten_after == 2 for r in with_workers), loader.readings
    assert not loader.readings[0].beaten_after  # the run's own: nothing to race yet
    assert loader.settings.num_workers == 0
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    measured = [
        t
        for t in study.trials
        if t.state == optuna.trial.TrialState.COMPLETE and TrialKey.REPEAT_OF not in t.user_attrs
    ]
    assert {t.user_attrs[TrialKey.CONFIG] for t in measured} >= {
        r.settings.short() for r in with_workers
    }
    for trial in measured:  # recorded as the study records a trial it pruned
        settings = PipelineConfig.from_dict(trial.user_attrs[TrialKey.PIPELINE])
        if settings.num_workers:
            assert trial.user_attrs[TrialKey.PRUNED_AFTER] == 2


def test_a_storage_that_cannot_be_opened_is_one_warning_and_the_run_goes_on(caplog) -> None:
    loader = autotune.DataLoader(
        Work(), batch_size=4, window=BRIEF_WINDOW, storage="sqlite:////proc/no/such/autotune.db"
    )
    with caplog.at_level(logging.WARNING, logger="autotune"):
        assert sum(len(b) for b in loader) == len(Work())
    assert caplog.text.count("not recorded") == 1


def test_a_storage_that_fails_as_exploring_starts_is_one_warning_and_the_run_goes_on(
    tmp_path, monkeypatch, caplog
) -> None:
    """The storage opened, then locked by another writer (forced: the write that records
    the run's own settings' reading fails as a locked SQLite file fails it)."""

    def locked(*args: object, **kwargs: object) -> None:
        raise optuna.exceptions.StorageInternalError("database is locked")

    monkeypatch.setattr(study_storage, "add_trial", locked)
    storage = f"sqlite:///{tmp_path}/autotune.db"
    loader = autotune.DataLoader(Work(), batch_size=4, window=BRIEF_WINDOW, storage=storage)
    with caplog.at_level(logging.WARNING, logger="autotune"):
        for _ in range(2):
            assert sum(len(b) for b in loader) == len(Work())
    assert caplog.text.count("not recorded") == 1 and "database is locked" in caplog.text
    assert loader.explorer.done and not loader.switches  # type: ignore[union-attr] # its own


def test_a_run_stopped_while_a_setting_is_asked_leaves_no_trial_running(
    tmp_path, monkeypatch
) -> None:
    """Ctrl-C between the sampler's ask and the setting's first batch (forced: raised where
    the space reads the trial's params)."""
    space = online_space(FACTS, batch_size=4, cuda=False)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", direction="maximize")
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=100, study=study)
    explorer.measured(reading(START, 100.0))  # told: the next setting is asked

    def stopped(self: SearchSpace, trial: optuna.Trial) -> PipelineConfig:
        raise KeyboardInterrupt

    monkeypatch.setattr(SearchSpace, "suggest", stopped)
    with pytest.raises(KeyboardInterrupt):
        explorer.failed()
    explorer.close()  # as the loader's finalizer does, at the process's exit
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))


@pytest.mark.parametrize("how", ["tune=False", "AUTOTUNE=off"])
def test_off_it_never_switches(how, monkeypatch, tmp_path) -> None:
    if how == "AUTOTUNE=off":
        monkeypatch.setenv("AUTOTUNE", "off")
    loader = autotune.DataLoader(
        Work(),
        batch_size=4,
        window=BRIEF_WINDOW,
        storage=f"sqlite:///{tmp_path}/autotune.db",
        **({"tune": False} if how == "tune=False" else {}),
    )
    for _ in range(2):
        for _ in loader:
            pass
    assert loader.explorer is None and not loader.switches
    assert loader.readings  # still measured


def test_a_share_below_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="tune must be True, False or a share >= 0"):
        autotune.DataLoader(Work(), tune=-0.5)


@pytest.mark.parametrize(("rate", "kept"), [(105.0, "own"), (150.0, "faster")])
def test_the_run_s_own_is_kept_unless_another_beats_it_by_more_than_the_noise(rate, kept) -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=100_000, clock=Clock())
    explorer.measured(Reading(START, 100.0, 0.2, 0.5, 0.0, batches=10, seconds=1.0))
    other = explorer.current
    explorer.measured(Reading(other, rate, 0.2, 0.5, 0.0, batches=10, seconds=1.0))
    assert explorer.best.settings == (START if kept == "own" else other)  # type: ignore[union-attr]


def test_a_proposal_no_epoch_can_time_is_failed_with_why_at_once_costing_nothing() -> None:
    # 8 CPUs: up to 8 workers, whose sub-windows are whole rounds of them: an epoch of 6
    # batches holds its first, one extra and a sub-window of up to 4 workers, not of more
    space = online_space(dataclasses.replace(FACTS, usable_cpus=8), batch_size=4, cuda=False)
    clock, epoch = Clock(), 6

    def fewest(settings: PipelineConfig) -> int:
        return fewest_batches(settings, BRIEF_WINDOW)

    explorer = Explorer(
        space, START, share=100.0, batches_per_epoch=epoch, fewest_batches=fewest, clock=clock
    )
    tried = explore(explorer, clock)
    assert len(tried) >= 2 and all(fewest(s) <= epoch for s in tried)  # measured: each fits
    failed = [t for t in explorer.study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed  # the sampler did propose longer ones: failed, never run
    assert all(fewest(space.config_at(t.params)) > epoch for t in failed)
    # nothing measured but the settings run: the budget went to them alone (1 s each)
    assert clock.now == len(tried) and explorer.done


def test_a_proposal_the_passes_of_a_loader_made_anew_cannot_time_fails_as_it_joins() -> None:
    """Asked where a whole epoch of 32 batches could time it, then taken up by a loader made
    anew whose loop reads 10 batches of it: failed with why, the next asked in its place."""
    space = online_space(dataclasses.replace(FACTS, usable_cpus=8), batch_size=4, cuda=False)
    clock = Clock()

    def fewest(settings: PipelineConfig) -> int:
        return fewest_batches(settings, BRIEF_WINDOW)

    explorer = Explorer(
        space, START, share=100.0, batches_per_epoch=32, fewest_batches=fewest, clock=clock
    )
    explorer.measured(reading(START, rate_of(START)))
    while fewest(explorer.current) <= 9:  # measured until a proposal needs more than 9
        explorer.measured(reading(explorer.current, rate_of(explorer.current)))
    asked = explorer.current
    anew = Passes(left_after=10, _last_left=10)  # ten steps a loader: nine timed
    explorer.joined(anew, made_anew=True)
    assert explorer.current != asked and fewest(explorer.current) <= 9
    (failed,) = [t for t in explorer.study.trials if space.config_at(t.params) == asked]
    assert failed.state == optuna.trial.TrialState.FAIL  # told why where recorded


def test_a_budget_shorter_than_a_setting_s_shortest_timing_explores_nothing() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    # an epoch of 100 batches at 10 batches/s: 10 s of budget; a setting needs at least 12 s
    explorer = Explorer(
        space, START, share=1.0, batches_per_epoch=100, min_setting_s=12.0, clock=Clock()
    )
    explorer.measured(reading(START, 100.0))
    assert explorer.done and explorer.current == START


def test_tune_true_pauses_on_the_best_and_explores_on_as_the_run_earns_the_time() -> None:
    """A budget of an epoch (10 s) or a tenth of the run so far: settings of 2 s each, a
    reading every 2 s, a run of up to 1000 s."""
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    explorer = Explorer(
        space, START, share=1.0, batches_per_epoch=50, min_setting_s=2.0, run_share=0.1,
        clock=clock,
    )  # fmt: skip
    spent, proposals_at, paused_at = 0.0, [], []
    while clock.now < 1000 and not explorer.done:
        current, proposal = explorer.current, not explorer.paused and clock.now > 0
        clock.now += 2.0
        explorer.measured(reading(current, rate_of(current), seconds=2.0))
        if proposal:
            spent += 2.0
            proposals_at.append(clock.now)
        # never more than the larger of an epoch and a tenth of the run so far, and one over
        assert spent <= max(10.0, 0.1 * clock.now) + 2.0
        if explorer.paused:  # the best so far runs, and is the one kept
            paused_at.append(clock.now)
            assert explorer.current == explorer.best.settings  # type: ignore[union-attr]
    assert min(paused_at) < 20 < max(proposals_at)  # paused early, explored on later
    measured = [r.settings for r in explorer._readings.values()]
    assert explorer.best.settings == max(measured, key=rate_of)  # type: ignore[union-attr]


def points_of(monkeypatch, workers: tuple[int, ...]) -> Callable[..., SearchSpace]:
    """The run's space cut to one point each of ``workers`` (each kept alive, torch's
    prefetch, one thread), the explorer's from here."""
    pinned = {
        "num_workers": {"type": "choice", "choices": workers},
        "prefetch_factor": {"low": 2, "high": 2},
        "persistent_workers": {"type": "choice", "choices": (True,)},
        "main_threads": {"low": 1, "high": 1},
    }

    def points(*args, **kwargs) -> SearchSpace:
        space = online_space(*args, **kwargs)
        knobs = tuple(dataclasses.replace(k, **pinned[k.name]) for k in space.knobs)
        return dataclasses.replace(space, knobs=knobs)

    monkeypatch.setattr(explorer_module, "online_space", points)
    return points


@pytest.mark.slow  # real workers for the points an epoch can time: seconds
def test_a_proposal_no_epoch_can_time_is_failed_with_why_and_exploring_goes_on(
    tmp_path, monkeypatch
) -> None:
    # three points: no workers, one, or twelve; a sub-window of twelve, in whole rounds of
    # them, is longer than an epoch of 10 batches. Exploring ends once each is told,
    # whatever the sampler draws first
    three_points = points_of(monkeypatch, (0, 1, 12))
    storage = f"sqlite:///{tmp_path}/autotune.db"
    data = torch.utils.data.Subset(Work(), range(40))
    # a budget far beyond the two settings it measures, however slow their workers start
    kwargs = {"tune": 10_000.0, "window": BRIEF_WINDOW, "storage": storage}
    loader = autotune.DataLoader(data, batch_size=4, **kwargs)
    assert len(three_points(detect(), batch_size=4, cuda=False).grid()) == 3
    for _ in range(60):
        sum(1 for _ in loader)
        if loader.explorer is not None and loader.explorer.done:
            break
    assert loader.explorer is not None and loader.explorer.done  # never stuck on one
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    why = "longer than an epoch of 10 batches"
    assert failed and all(why in str(t.user_attrs) for t in failed)
    assert {store.failure_kind(t) for t in failed} == {FailureKind.UNTIMEABLE}
    assert {t.params["num_workers"] for t in failed} == {12}  # one worker fits: measured
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert any(t.params.get("num_workers") == 1 and t.value for t in complete)
    assert {r.settings.num_workers for r in loader.readings} == {0, 1}
    assert 12 not in {s.settings.num_workers for s in loader.switches}  # failed, never run
    sum(1 for _ in loader)  # the setting kept is read with from the next epoch
    assert loader.settings.num_workers in (0, 1)  # what an epoch could time: kept


class Buckets(torch.utils.data.Sampler):
    """A bucketing batch sampler's epochs, whose length varies: 10 batches of 4, or 2."""

    def __init__(self) -> None:
        self.epochs = 0

    def _batches(self) -> int:
        return 2 if self.epochs % 3 == 2 else 10

    def __iter__(self):
        batches, self.epochs = self._batches(), self.epochs + 1
        return iter([list(range(4 * b, 4 * b + 4)) for b in range(batches)])

    def __len__(self) -> int:
        return self._batches()


@pytest.mark.slow  # real workers: seconds
def test_an_epoch_shorter_than_the_run_s_longest_fails_no_setting(
    tmp_path, monkeypatch, caplog
) -> None:
    """Every third epoch is 2 batches long: no setting can be timed in it, and each can be
    in the others. Such an epoch used to fail the setting read in it (or, before anything
    else was read, stop the run's tuning); each point is measured now, none failed. The
    kept setting is said in short, and why no best.yaml holds it."""
    caplog.set_level(logging.INFO, logger="autotune")
    points_of(monkeypatch, (0, 1, 2))
    storage = f"sqlite:///{tmp_path}/autotune.db"
    loader = autotune.DataLoader(
        torch.utils.data.Subset(Work(), range(40)), batch_sampler=Buckets(),
        tune=10_000.0, window=BRIEF_WINDOW, storage=storage,
    )  # fmt: skip
    for _ in range(60):
        delivered = [int(i) for batch in loader for i in batch]
        assert sorted(delivered) == list(range(len(delivered)))  # each once, as drawn
        if loader.explorer is not None and loader.explorer.done:
            break
    assert loader.explorer is not None and loader.explorer.done
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    assert {r.settings.num_workers for r in loader.readings} == {0, 1, 2}
    kept = f"kept {loader.settings.short()} (no best.yaml: your batch_sampler batches)"
    assert kept in caplog.text


def test_a_drift_of_the_kept_rate_measures_the_runners_up_again_and_keeps_the_fastest() -> None:
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=100_000, clock=clock)

    def rate(settings: PipelineConfig) -> float:  # no two settings alike
        kept_alive = 0.3 if settings.persistent_workers else 0.0
        return rate_of(settings) + kept_alive + 0.01 * (settings.main_threads or 0)

    while not explorer.done:  # every point measured, the fastest kept
        explorer.measured(reading(explorer.current, rate(explorer.current)))
    kept = explorer.current
    ranked = sorted(explorer._readings.values(), key=lambda r: r.samples_per_s, reverse=True)

    def now_rate(settings: PipelineConfig) -> float:  # the kept setting lost half its rate
        return rate(settings) / (2 if settings == kept else 1)

    for _ in range(SUSTAINED - 1):  # a reading or two off is noise
        assert explorer.measured(reading(kept, now_rate(kept))) == kept and explorer.done
    explorer.measured(reading(kept, now_rate(kept)))
    assert explorer.rechecks == 1 and not explorer.done
    measured_again = []
    while not explorer.done and len(measured_again) < 20:
        measured_again.append(explorer.current)
        clock.now += 1.0
        explorer.measured(reading(explorer.current, now_rate(explorer.current)))
    # the runners-up first, then the kept setting again
    assert measured_again[:3] == [r.settings for r in ranked[1:3]] + [kept]
    # then the sampler, with a fresh budget; what is kept is measured since the drift
    assert explorer.best.settings == max(measured_again, key=now_rate)  # type: ignore[union-attr]


def test_a_drift_that_passes_while_the_runners_up_are_measured_keeps_the_setting() -> None:
    """A neighbour's job halves the kept setting's rate, long enough for a drift, and ends
    as the runners-up are measured: the kept setting, measured again after them, stays kept
    (its reading from the drift is not held against it)."""
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()  # 1 s a setting; a fresh start's budget: 4 s, the runners-up and the kept
    explorer = Explorer(space, START, share=1.0, batches_per_epoch=40, clock=clock)
    for _ in range(40):
        if explorer.done:
            break
        clock.now += 1.0
        explorer.measured(reading(explorer.current, rate_of(explorer.current)))
    kept = explorer.current
    for _ in range(SUSTAINED):  # its rate halved, then the neighbour leaves
        explorer.measured(reading(kept, rate_of(kept) / 2))
    assert explorer.rechecks == 1
    while not explorer.done:
        clock.now += 1.0
        explorer.measured(reading(explorer.current, rate_of(explorer.current)))
    assert explorer.current == kept


class SlowsDown(torch.utils.data.Dataset):
    """Items that take 2 ms, or 30 ms once the file ``slow`` exists (seen by every worker):
    the machine changing under a run."""

    def __init__(self, slow: Path) -> None:
        self.slow = slow

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.03 if self.slow.exists() else 0.002)
        return torch.tensor(index)


@pytest.mark.slow  # a first run exploring, then a second run whose rate falls tenfold
def test_a_run_started_at_a_kept_setting_explores_again_where_its_rate_moves(tmp_path) -> None:
    slow, storage = tmp_path / "slow", f"sqlite:///{tmp_path}/autotune.db"

    def make() -> autotune.DataLoader:
        return autotune.DataLoader(
            SlowsDown(slow), batch_size=4, tune=3.0, window=BRIEF_WINDOW, storage=storage
        )

    first = make()
    for _ in range(10):
        sum(1 for _ in first)
    explored_first = len(first.explorer.study.trials)  # type: ignore[union-attr]
    again = make()
    epochs = 0
    while not again.readings and epochs < 10:  # the reading drifts are measured from
        sum(1 for _ in again)
        epochs += 1
    assert again.readings and again.explorer is None and not again.switches  # kept setting
    slow.touch()  # the machine changed: the same setting now reads many times slower
    epochs = 0
    # 3 s of readings off the kept rate: 13 epochs of these, 26 where the kept setting's
    # warm-up leaves room for one sub-window an epoch (a deeper prefetch)
    while again.explorer is None and epochs < 40:
        assert sorted(i for b in again for i in b.tolist()) == list(range(40))
        epochs += 1
    assert again.explorer is not None  # it noticed, and explores again from where it stood
    sum(1 for _ in again)
    # recorded in the first run's study (opened at the drift, where the run's note put it off)
    assert len(again.explorer.study.trials) > explored_first


def test_where_a_switch_waits_for_the_next_epoch_each_proposal_is_charged_a_whole_one() -> None:
    """A stream: its length unknown until its first epoch ends; a fixed budget of three
    epochs' time; each proposal runs an epoch (10 batches/s, 50 batches: 5 s)."""
    space = online_space(FACTS, batch_size=4, cuda=False)
    clock = Clock()
    explorer = Explorer(
        space, START, share=3.0, batches_per_epoch=None, whole_epochs=True, clock=clock
    )
    explorer.measured(reading(START, 100.0))  # in the first epoch: no unit for the budget yet
    assert explorer.paused and not explorer.done and explorer.current == START
    proposals = []
    for _ in range(8):  # each epoch: its end, then the setting it ran, read within it
        following = explorer.epoch_ended(50)
        if explorer.done:
            break
        proposals.append(following)
        clock.now += 0.5  # a reading taken early in the epoch: the rest still runs it
        explorer.measured(reading(following, rate_of(following)))
    assert len(proposals) == 3  # three epochs' time, an epoch each, however soon each read
    assert explorer.done and explorer.current == max([START, *proposals], key=rate_of)


def test_a_point_an_earlier_run_queued_outside_this_run_s_space_is_failed_and_skipped(
    recwarn,
) -> None:
    """An earlier run, whose reads waited, queued a setting of 64 workers and ended before
    asking for it; this run's space stops at the CPUs."""
    space = online_space(FACTS, batch_size=4, cuda=False)
    study = optuna.create_study(direction="maximize")
    own = PipelineConfig(decoder=AS_IS, batch_size=4, main_threads=1)  # a point of the space
    wide = {**space.params_of(own), "num_workers": 64}  # type: ignore[arg-type]
    study.enqueue_trial({**wide, "prefetch_factor": 2, "persistent_workers": True})
    clock = Clock()
    explorer = Explorer(space, own, share=1.0, batches_per_epoch=100_000, study=study, clock=clock)
    tried = explore(explorer, clock, limit=6)  # its own points, then the sampler's
    assert all(s.num_workers <= FACTS.usable_cpus for s in tried)  # the queued point skipped
    (failed,) = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed.params["num_workers"] == 64
    assert "outside this run's space" in failed.user_attrs[TrialKey.FAILURE]["message"]
    assert not [w for w in recwarn if "Fixed parameter" in str(w.message)]


def test_a_setting_is_charged_each_pass_s_start_over_the_batches_a_pass_reads() -> None:
    # workers started each pass (1 s beyond a batch of 0.1 s): over an epoch of 100 batches
    # that is a tenth more; over passes of 10 a loop leaves its epochs after, twice the time
    space = online_space(FACTS, batch_size=4, cuda=False)
    rates = []
    start = dataclasses.replace(START, num_workers=2, prefetch_factor=2)
    for batches_a_pass in (None, 10):
        explorer = Explorer(space, start, share=1.0, batches_per_epoch=100, clock=Clock())
        read = Reading(start, 40.0, 0.02, 0.1, 1.1, batches=10, seconds=1.0)
        explorer.measured(read, batches_a_pass)
        rates.append(explorer.start_reading.samples_per_s)  # type: ignore[union-attr]
    assert rates == pytest.approx([40.0 * 10 / 11, 40.0 * 1 / 2])


def too_close_to_call() -> tuple[Explorer, Clock, PipelineConfig, PipelineConfig]:
    """An explorer whose proposal's first reading ran into a neighbour's burst: 118 ± 0.4
    against the run's own 100 ± 0.02 (the explorer, its clock, the run's own, the proposal)."""
    space = online_space(FACTS, batch_size=4, cuda=False)
    own = PipelineConfig(decoder=AS_IS, batch_size=4, main_threads=1)  # a point of the space
    clock = Clock()
    # an epoch of 15 batches at 10 batches/s: 1.5 s of budget; 1 s a setting
    explorer = Explorer(
        space, own, share=1.0, batches_per_epoch=15, min_setting_s=1.0, clock=clock
    )
    explorer.measured(Reading(own, 100.0, 0.02, 0.5, 0.0, batches=10, seconds=1.0))
    other = explorer.current
    clock.now += 1.0
    explorer.measured(Reading(other, 118.0, 0.4, 0.5, 0.0, batches=12, seconds=1.0))
    return explorer, clock, own, other


@pytest.mark.parametrize(("second", "kept"), [(150.0, "faster"), (100.0, "own")])
def test_a_setting_faster_within_the_noise_is_measured_again_with_the_run_s_own(
    second, kept
) -> None:
    """The proposal's first reading ran into a neighbour's burst (118 ± 0.4 against the run's
    own 100 ± 0.02): neither is kept on it. Both are measured once more, costing no budget,
    and the two readings of each decide."""
    explorer, clock, own, other = too_close_to_call()
    spent, looked = explorer.budget.spent_s, []
    while not explorer.done and len(looked) < 10:
        looked.append(settings := explorer.current)
        clock.now += 1.0
        rate = {own: 100.0, other: second}[settings]
        explorer.measured(Reading(settings, rate, 0.02, 0.5, 0.0, batches=10, seconds=1.0))
    assert looked == [other, own] and explorer.budget.spent_s == spent  # once more, free
    best = explorer.best
    assert best is not None and best.settings == (other if kept == "faster" else own)
    assert best.batches == (22 if kept == "faster" else 20)  # both readings pooled
    assert explorer.current == best.settings
    start = explorer.start_reading  # best.yaml's baseline: the run's own, both readings
    assert start is not None and start.batches == 20
    looks = [t for t in explorer.study.trials if TrialKey.LOOK_OF in t.user_attrs]
    assert [store.pipeline_of(t) for t in looks] == [other, own]  # each a trial of its own
    assert [t.value for t in looks] == [second, 100.0]


def test_a_setting_whose_workers_fail_on_its_second_look_is_never_kept() -> None:
    explorer, clock, own, other = too_close_to_call()
    assert explorer.current == other and not explorer.settled  # its second look
    assert explorer.failed() == own and explorer.settled  # no more looks: the run's own kept
    assert explorer.best is not None and explorer.best.settings == own


@pytest.mark.slow  # a few settings of real workers over sleeping reads: seconds
def test_a_loop_that_leaves_its_epochs_early_is_timed_within_each_pass(tmp_path) -> None:
    """A loop of 6 steps an epoch (of 24 batches): a sub-window of half a second would be
    longer than a pass, and one open as the loop leaves never closes. Each pass times what it
    leaves after its warm-up; a pass is the budget's epoch; no setting is proposed that a
    pass cannot time (the workers the waiting reads invite: up to 64)."""
    window = dataclasses.replace(BRIEF_WINDOW, min_sub_window_s=0.5)
    loader = autotune.DataLoader(
        Waits(), batch_size=4, tune=20.0, window=window, storage=f"sqlite:///{tmp_path}/a.db"
    )
    for _ in range(30):
        for index, _ in enumerate(loader):
            if index == 5:
                break
    assert loader.readings and loader.readings[0].settings == loader.own
    assert any(r.settings.num_workers for r in loader.readings), loader.readings
    assert loader.passes.left_after == 6 and loader.explorer is not None
    assert loader.explorer.budget.epoch_batches == 6
    assert max(loader.explorer.space.choices("num_workers")) > 5  # offered, not proposed:
    assert all(fewest_batches(r.settings, window) <= 5 for r in loader.readings)


@pytest.mark.slow  # a few settings of real workers: seconds
def test_a_loop_that_leaves_sooner_than_before_keeps_what_it_timed_and_asks_no_more(
    tmp_path,
) -> None:
    """Whole epochs, then passes of 2 steps (the loop leaves at varying batches): no
    setting can be timed in those, and nothing more is asked. What whole epochs timed is
    kept, never failed as untimeable for passes too short for it."""
    loader = autotune.DataLoader(
        Work(), batch_size=4, tune=3.0, window=BRIEF_WINDOW, storage=f"sqlite:///{tmp_path}/a.db"
    )
    for _ in range(2):
        assert sum(1 for _ in loader) == 48
    read = {r.settings for r in loader.readings}
    assert loader.own in read and loader.explorer is not None
    for _ in range(6):
        for index, _ in enumerate(loader):
            if index == 1:
                break
    explorer = loader.explorer
    assert loader.passes.left_after == 2 and explorer.done and explorer.best is not None
    failed = {
        store.pipeline_of(t): store.trial_attr(t, TrialKey.FAILURE)["kind"]
        for t in explorer.study.trials
        if t.state.name == "FAIL"
    }
    assert not read & set(failed), failed  # what whole epochs timed is never failed
    assert len(failed) <= 2 and set(failed.values()) <= {FailureKind.UNTIMEABLE.value}
    assert explorer.best.settings in read
    loader.release()


def test_a_loop_whose_passes_are_too_short_to_time_its_settings_says_so(tmp_path, caplog) -> None:
    """A warm-up and one sub-window never fit in 2 steps an epoch: the run's own settings are
    untimeable, said in one line, and nothing is explored."""
    loader = autotune.DataLoader(
        Work(), batch_size=4, window=BRIEF_WINDOW, storage=f"sqlite:///{tmp_path}/a.db"
    )
    with caplog.at_level("INFO", logger="autotune"):
        for _ in range(6):
            for index, _ in enumerate(loader):
                if index == 1:
                    break
    assert loader.readings == [] and loader.explorer is None and loader.tuning.share == 0
    assert caplog.text.count("2 batches your loop reads of an epoch before it leaves") == 1


@pytest.mark.slow  # a few settings of real workers: seconds
def test_a_peek_or_passes_nested_in_one_fail_no_setting_and_leave_the_budget_an_epoch(
    tmp_path,
) -> None:
    """A pass left early once (a peek at a batch mid-run) or over and over at other batches
    (a pass nested in each batch of another) is not a loop of a number of steps an epoch:
    no setting fails as too long for it, and the budget's epoch stays an epoch."""
    storage = f"sqlite:///{tmp_path}/a.db"
    loader = autotune.DataLoader(
        Work(), batch_size=4, tune=3.0, window=BRIEF_WINDOW, storage=storage
    )
    for epoch in range(5):
        assert sum(1 for _ in loader) == 48
        if epoch == 1:
            next(iter(loader))
        if epoch == 2:
            assert all(sum(1 for _ in loader) == 48 for _ in loader)
    assert loader.explorer is not None and loader.explorer.budget.epoch_batches == 48
    assert loader.passes.left_after == 0 and loader.tuning.share
    failed = [t for t in loader.explorer.study.trials if t.state.name == "FAIL"]
    assert not failed, [store.trial_attr(t, TrialKey.FAILURE) for t in failed]
    loader.release()


def test_a_setting_whose_workers_start_slowly_waits_until_the_budget_pays_their_start() -> None:
    """Under spawn or forkserver, each worker's start is seconds of CPU: 16 workers on 2 CPUs
    take 8 rounds of the one round of 2 seen (3 s). Exploring pauses at the best so far until
    a tenth of the run pays 24 s of starts and a timing, then measures them, and keeps them."""
    space = online_space(FACTS, batch_size=4, cuda=False, workers=(0, 2, 16))
    clock = Clock()
    explorer = Explorer(
        space, START, share=1.0, run_share=0.1, batches_per_epoch=10, min_setting_s=0.5,
        starts=WorkerStarts(2, slow=True), clock=clock,
    )  # fmt: skip
    first_many, paused_waiting = None, False
    while not explorer.done and clock.now < 2000:
        settings = explorer.current
        clock.now += 1.0
        if settings.num_workers == 16 and first_many is None:
            first_many = clock.now
        paused_waiting |= explorer.paused and explorer.admission.waiting_s is not None
        first_batch_s = 3.1 if settings.num_workers else 0.0  # a start of 3 s a round of 2
        explorer.measured(Reading(settings, rate_of(settings), 0.02, 0.5, first_batch_s, 10, 1.0))
    assert paused_waiting
    assert first_many is not None and first_many > 245  # a tenth of the run: 24.5 s
    assert explorer.current.num_workers == 16


def test_a_proposal_that_runs_a_whole_epoch_is_charged_its_workers_slow_start() -> None:
    """A stream's proposal runs an epoch, charged as one: its workers' start (3 s, under
    spawn or forkserver) comes before that epoch's batches, and is charged too."""
    space = online_space(FACTS, batch_size=4, cuda=False, workers=(0, 2))
    clock = Clock()
    explorer = Explorer(
        space, START, share=20.0, batches_per_epoch=10, whole_epochs=True,
        starts=WorkerStarts(2, slow=True), clock=clock,
    )  # fmt: skip
    explorer.measured(Reading(START, 100.0, 0.02, 0.5, 0.0, 10, 1.0))  # epochs of 1 s
    proposal = explorer.current
    assert proposal.num_workers == 2
    explorer.measured(Reading(proposal, 100.0, 0.02, 0.5, 3.1, 10, 1.0))
    assert explorer.budget.spent_s == pytest.approx(1.0 + 3.0)
