"""The objective without a study: pre-checks, the epoch projection, what a trial records."""

from __future__ import annotations

import dataclasses
import logging

import optuna
import pytest

from autotune import machine
from autotune.app import composition
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import synthetic
from autotune.runtime.failures import Failure
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.session import SearchSpace, Session
from autotune.tuner import objective as objective_module
from autotune.tuner.objective import Objective, TrialFailed, precheck
from autotune.tuner.ways import make_pruner

MiB = 2**20


@pytest.fixture(scope="module")
def cfg():
    return composition.to_config(
        composition.compose(["search_space=quick", "study.memory_budget_gb=0.5"])
    )


@pytest.fixture(scope="module")
def facts():
    return machine.detect(want_cuda=False)


@pytest.fixture(scope="module")
def source():
    return synthetic(count=40, num_classes=2)


def objective(cfg, facts, source, run):
    space = SearchSpace.from_config(cfg.search_space, facts, device="cpu", batch_size=8)
    return Objective(Session(cfg, facts, "cpu", source, space, "test"), run=run)


def fake_run(measurement=None, failure=None, peak=300 * MiB):
    def run(job, *, timeout_s, should_prune=lambda i, v: False):
        for i, v in enumerate(measurement.sub_window_samples_per_s if measurement else ()):
            should_prune(i, v)
        status = "ok" if measurement else "failed"
        return TrialOutcome(
            status, measurement=measurement, failure=failure, peak_memory_bytes=peak, wall_s=1.0
        )

    return run


WORKERS = {"num_workers": 2, "decoder": "pil", "main_threads": 1}


def test_precheck_refuses_what_does_not_fit_in_shm(facts):
    config = PipelineConfig(batch_size=256, num_workers=8, prefetch_factor=8)
    tight = dataclasses.replace(facts, shm_free_bytes=64 * MiB)
    reason = precheck(config, tight, sample_bytes=3 * 224 * 224)
    assert reason and "/dev/shm" in reason and "num_workers x prefetch_factor" in reason
    roomy = dataclasses.replace(facts, shm_free_bytes=64 * 2**30, memory_available_bytes=2**40)
    assert precheck(config, roomy, sample_bytes=3 * 224 * 224) is None
    assert precheck(PipelineConfig(batch_size=256), tight, sample_bytes=3 * 224 * 224) is None


def test_a_config_that_cannot_fit_is_skipped_not_run(cfg, facts, source):
    ran = []
    tight = dataclasses.replace(facts, shm_free_bytes=1 * MiB)
    trial = optuna.trial.FixedTrial({**WORKERS, "prefetch_factor": 2})
    with pytest.raises(optuna.TrialPruned):
        objective(cfg, tight, source, lambda *a, **k: ran.append(1))(trial)
    assert not ran
    assert "/dev/shm" in trial.user_attrs["skipped"]


def test_objective_returns_the_epoch_rate_and_records_figures(cfg, facts, source):
    m = Measurement(200.0, (190.0, 200.0, 210.0), 0.3, 0.04 + 32 / 200.0, 8, 9)  # batch 32
    restarts = composition.to_config(
        composition.compose(
            ["search_space=quick", "search_space.knobs.persistent_workers.value=false"]
        )
    )
    value = objective(restarts, facts, source, fake_run(m))(
        optuna.trial.FixedTrial({**WORKERS, "prefetch_factor": 2})
    )
    epoch = 40 // 32 * 32  # start-up beyond one batch (0.04 s) is charged once per epoch
    assert value == pytest.approx(epoch / (epoch / 200.0 + 0.04), rel=1e-3)
    persistent = optuna.trial.FixedTrial({**WORKERS, "prefetch_factor": 2})  # quick: persist
    assert objective(cfg, facts, source, fake_run(m))(persistent) == 200.0
    trial = optuna.trial.FixedTrial({"num_workers": 0, "decoder": "pil", "main_threads": 1})
    assert objective(cfg, facts, source, fake_run(m))(trial) == 200.0  # nothing to restart
    # a boundary the window made: the next epoch's start is charged, persistent or not
    bounded = dataclasses.replace(m, epoch_start_s=0.05 + 32 / 200.0)
    persistent = optuna.trial.FixedTrial({**WORKERS, "prefetch_factor": 2})
    value = objective(cfg, facts, source, fake_run(bounded))(persistent)
    assert value == pytest.approx(epoch / (epoch / 200.0 + 0.05), rel=1e-3)
    attrs = trial.user_attrs
    assert attrs["samples_per_s_steady"] == 200.0
    assert attrs["samples_per_s_sub_windows"] == [190.0, 200.0, 210.0]
    assert attrs["peak_memory_mb"] == 300.0
    # over study.memory_budget_gb=0.5 -> infeasible (> 0) for Optuna's constraints
    assert attrs["constraint"] == pytest.approx(300 / 1024 - 0.5)


def test_a_failed_measurement_raises_and_records_its_reason(cfg, facts, source):
    trial = optuna.trial.FixedTrial({"num_workers": 0, "decoder": "pil", "main_threads": 1})
    run = fake_run(failure=Failure("worker_died", "DataLoader worker exited unexpectedly"))
    with pytest.raises(TrialFailed, match="worker_died"):
        objective(cfg, facts, source, run)(trial)
    assert trial.user_attrs["failure"]["kind"] == "worker_died"
    assert "num_workers=0" in trial.user_attrs["failure"]["hint"]


def test_a_config_that_failed_is_not_run_again_and_fails_the_same(cfg, facts, source):
    runs = []
    failing = fake_run(failure=Failure("timeout", "no result after 120 s"))

    def run(job, **kwargs):
        runs.append(job.pipeline.short())
        return failing(job, **kwargs)

    study = optuna.create_study(direction="maximize")
    measure = objective(cfg, facts, source, run)
    for _ in range(2):
        study.enqueue_trial(WORKERS)
        study.optimize(measure, n_trials=1, catch=(TrialFailed,))
    first, again = study.trials
    assert len(runs) == 1 and first.user_attrs["failure"]["kind"] == "timeout"
    assert again.state == optuna.trial.TrialState.FAIL
    assert again.user_attrs["repeat_of"] == 0 and "failure" not in again.user_attrs


def test_a_config_whose_run_was_interrupted_is_measured_again(cfg, facts, source):
    runs = []
    outcomes = iter(
        [
            fake_run(failure=Failure("interrupted", "stopped by Ctrl-C")),
            fake_run(Measurement(100.0, (100.0,) * 3, 0.1, 0.01, 2, 6)),
        ]
    )

    def run(job, **kwargs):
        runs.append(job.pipeline.short())
        return next(outcomes)(job, **kwargs)

    study = optuna.create_study(direction="maximize")
    measure = objective(cfg, facts, source, run)
    for _ in range(2):
        study.enqueue_trial(WORKERS)
        study.optimize(measure, n_trials=1, catch=(TrialFailed,))
    assert len(runs) == 2 and "repeat_of" not in study.trials[1].user_attrs
    assert study.trials[1].value is not None


def test_a_trial_clearly_beaten_so_far_is_pruned_and_says_by_what(cfg, facts, source, caplog):
    """Racing in the search: at its window's first report a trial whose rate so far, even
    10 % higher, is below its way's best stops there, and the log says both rates."""

    def run(job, *, timeout_s, should_prune=lambda i, v: False):
        rates = (300.0,) * 3 if job.pipeline.decoder == "opencv" else (800.0,) * 3
        for i, rate in enumerate(rates):
            if should_prune(i, rate):
                return TrialOutcome("pruned", peak_memory_bytes=MiB, pruned_at=i, wall_s=1.0)
        m = Measurement(rates[0], rates, 0.1, 0.01, 2, 6)
        return TrialOutcome("ok", measurement=m, peak_memory_bytes=MiB, wall_s=1.0)

    study = optuna.create_study(direction="maximize", pruner=make_pruner())
    measure = objective(cfg, facts, source, run)
    with caplog.at_level(logging.INFO, logger=objective_module.__name__):
        for decoder in ("pil", "opencv"):
            study.enqueue_trial({**WORKERS, "prefetch_factor": 2, "decoder": decoder})
            study.optimize(measure, n_trials=1)
    best, beaten = study.trials
    assert best.value == 800.0 and beaten.state == optuna.trial.TrialState.PRUNED
    assert beaten.intermediate_values == {0: 300.0}  # stopped at the first
    said = [r.getMessage() for r in caplog.records if "pruned after" in r.getMessage()]
    assert said and "pruned after sub-window 1: 300.0 samples/s so far" in said[0]
    assert "below its way's best (800.0)" in said[0]


def test_precheck_counts_every_rank_s_loader(facts):
    config = PipelineConfig(batch_size=64, num_workers=2, prefetch_factor=4)
    in_flight = 2 * 4 * 64 * 3 * 224 * 224  # one loader's batches in flight
    shm = dataclasses.replace(facts, shm_free_bytes=3 * in_flight, memory_available_bytes=2**40)
    assert precheck(config, shm, sample_bytes=3 * 224 * 224, ranks=2) is None
    assert "/dev/shm" in precheck(config, shm, sample_bytes=3 * 224 * 224, ranks=4)


def test_precheck_counts_a_shuffle_buffer_in_every_reading_process(facts):
    config = PipelineConfig(batch_size=32, num_workers=8, prefetch_factor=2)
    memory = dataclasses.replace(facts, memory_available_bytes=8 * 2**30, shm_free_bytes=None)
    # 8 workers x 2 ranks x 300 MiB: 4.7 GiB of buffers, over half of 8 GiB
    reason = precheck(config, memory, sample_bytes=3 * 224 * 224, ranks=2, buffer_bytes=300 * MiB)
    assert reason.startswith("~4800 MiB of the Dataset's buffers (300 MiB in each of 16 reading")
    assert "lower its shuffle_buffer (dataset.kwargs.shuffle_buffer) or num_workers" in reason
    assert precheck(config, memory, sample_bytes=3 * 224 * 224, buffer_bytes=300 * MiB) is None
