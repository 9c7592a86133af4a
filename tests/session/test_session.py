"""The session: built once from the config, bad input refused before anything is measured, the
ceiling measured once per train step."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import config_of, make_session

from autotune.errors import UsageError
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.schema import ModelConfig
from autotune.session import Session
from autotune.session.placement import resolve_device, resolve_ranks

SMALL = ["dataset.count=16", "dataset.num_classes=2", "search_space=quick"]


def test_build_loads_the_data_and_the_space() -> None:
    session = Session.build(config_of(SMALL))
    assert len(session.source) == 16 and len(session.source.classes) == 2
    assert session.device == "cpu"
    assert [k.name for k in session.space.knobs][:2] == ["num_workers", "prefetch_factor"]
    assert session.epoch_samples == 16 // 32 * 32  # batch 32: no whole batch in 16 samples


def test_a_bad_model_is_refused_before_anything_runs(tmp_path) -> None:
    with pytest.raises(UsageError, match="unknown model"):
        Session.build(config_of([*SMALL, "model.name=nope"]))
    with pytest.raises(UsageError, match="dataset.root"):
        Session.build(config_of(["dataset=mine", f"dataset.root={tmp_path}/none"]))


def test_cuda_is_refused_where_there_is_none() -> None:
    with pytest.raises(UsageError, match="device=cuda"):
        resolve_device("cuda", cuda_available=False)
    assert resolve_device("auto", cuda_available=False) == "cpu"


def test_the_fingerprint_follows_what_the_numbers_depend_on() -> None:
    session = make_session()
    same = session.with_conf(dataclasses.replace(session.conf, quiet=True))
    assert same.fingerprint == session.fingerprint
    window = dataclasses.replace(session.conf.window, sub_windows=9)
    other = session.with_conf(dataclasses.replace(session.conf, window=window))
    assert other.fingerprint != session.fingerprint


def _counting_run(calls: list[int], rate: float = 100.0, fail: bool = False):
    def run(job, *, timeout_s):
        calls.append(job.pipeline.main_threads)
        if fail:
            return TrialOutcome("failed", failure=Failure("error", "boom"))
        m = Measurement(rate * job.pipeline.main_threads, (rate,), 0.0, 0.1, 4, 8)
        return TrialOutcome("ok", measurement=m)

    return run


def test_the_ceiling_is_the_better_thread_count_measured_once_per_train_step() -> None:
    session = make_session()
    calls: list[int] = []
    ceiling = session.measure_ceiling(_counting_run(calls))
    cpus = session.facts.usable_cpus
    assert calls == list(dict.fromkeys((1, cpus)))
    assert ceiling is not None and ceiling.samples_per_s == 100.0 * cpus
    # other study settings: the same step, the same ceiling, not measured again
    renamed = session.with_conf(
        dataclasses.replace(
            session.conf, study=dataclasses.replace(session.conf.study, name="other")
        )
    )
    assert renamed.measure_ceiling(_counting_run(calls)) is ceiling
    assert len(calls) == len(dict.fromkeys((1, cpus)))
    # another model is another step: measured afresh
    alone = session.with_conf(dataclasses.replace(session.conf, model=ModelConfig("none")))
    alone.measure_ceiling(_counting_run(calls))
    assert len(calls) == 2 * len(dict.fromkeys((1, cpus)))


def test_a_ceiling_that_fails_says_why() -> None:
    failures: list[str] = []
    assert make_session().measure_ceiling(_counting_run([], fail=True), failures) is None
    assert failures and all("error: boom" in line for line in failures)


def test_a_job_carries_the_session_workload() -> None:
    session = make_session(["study.trial_memory_limit_gb=1.5"])
    job = session.job(PipelineConfig(num_workers=2), "ceiling")
    assert job.kind == "ceiling" and job.device == "cpu"
    assert job.model == session.conf.model and job.window == session.conf.window
    assert job.memory_limit_bytes == int(1.5 * 2**30)


def test_ranks_share_the_cpus_and_go_into_every_job_and_the_fingerprint() -> None:
    alone = Session.build(config_of([*SMALL, "search_space=default"]))
    two = Session.build(config_of([*SMALL, "search_space=default", "ranks=2"]))
    cpus = alone.facts.usable_cpus
    assert alone.ranks == 1 and two.ranks == 2
    assert two.cpus_per_rank == max(1, cpus // 2) and alone.cpus_per_rank == cpus
    workers = {k.name: k for k in two.space.knobs}["num_workers"]
    assert workers.high == two.cpus_per_rank  # `cpus` in the space: a rank's share
    assert any("2 ranks share" in note for note in two.space.notes)
    assert two.job(PipelineConfig()).ranks == 2 and alone.job(PipelineConfig()).ranks == 1
    assert two.default_threads == 1  # torchrun's OMP_NUM_THREADS=1 for each rank
    assert two.fingerprint != alone.fingerprint


def test_ranks_on_cuda_need_a_gpu_each() -> None:
    facts = make_session().facts
    four = dataclasses.replace(facts, gpu_count=4)
    assert resolve_ranks("auto", "cuda", four) == 4
    assert resolve_ranks("auto", "cpu", four) == 1
    assert resolve_ranks(2, "cpu", facts) == 2
    with pytest.raises(UsageError, match="ranks=8 needs 8 GPUs, one per rank, and 4 are"):
        resolve_ranks(8, "cuda", four)
