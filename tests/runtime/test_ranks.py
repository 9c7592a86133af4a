"""Trials of several ranks: real torch.distributed (gloo) rank processes, each with its own
DataLoader over its shard and the model in DistributedDataParallel; ranks that really crash
or hang, and Ctrl-C, leave nothing behind."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest
import torch
from test_trial import _no_leftovers, job

from autotune.pipeline.sources import synthetic
from autotune.runtime.child import UntilEnded
from autotune.runtime.measurement import Measurement
from autotune.runtime.ranks import node_measurement
from autotune.runtime.trial import run_trial


@pytest.fixture(scope="module")
def source():
    return synthetic(count=32, num_classes=2)


def test_each_rank_reads_a_disjoint_share_of_each_pass_in_whole_batches() -> None:
    n, batch_size = 26, 4  # 13 a rank: 3 whole batches, one sample left out of each share
    shares = [UntilEnded(n, seed=5, batch_size=batch_size, rank=r, ranks=2) for r in (0, 1)]
    assert [s.pass_batches for s in shares] == [3, 3]
    passes = [iter(s) for s in shares]
    for _ in range(3):  # the same shuffle on both ranks (one seed), each pass a new one
        zero, one = ([next(it) for _ in range(12)] for it in passes)
        assert not set(zero) & set(one) and len(set(zero) | set(one)) == 24
    alone = UntilEnded(n, seed=5, batch_size=batch_size)
    assert alone.pass_batches == 6


def test_the_node_adds_the_ranks_samples_over_the_same_seconds() -> None:
    def rank(rate: float, wait: float, spans: tuple[float, ...]) -> Measurement:
        return Measurement(
            rate, spans, wait, 0.5, 4, 8, timed_s=2.0, settled_samples_per_s=spans, grouped=1
        )

    node = node_measurement([rank(100.0, 0.1, (90.0, 110.0)), rank(80.0, 0.4, (70.0, 90.0))])
    assert node.samples_per_s == 180.0
    assert node.sub_window_samples_per_s == (160.0, 200.0) == node.settled_sub_windows
    assert node.data_wait_fraction == 0.4  # the slowest rank's
    assert node.rank_samples_per_s == (100.0, 80.0)
    assert node.rank_data_wait_fraction == (0.1, 0.4)


@pytest.mark.slow
def test_two_ranks_measure_the_node_with_ddp(source):
    outcome = run_trial(job(source, workers=1, ranks=2), timeout_s=120)
    assert outcome.status == "ok", outcome.failure
    m = outcome.measurement
    assert len(m.rank_samples_per_s) == 2 and all(r > 0 for r in m.rank_samples_per_s)
    # lockstep (each step all-reduces): the node's rate is the ranks' together
    assert m.samples_per_s == pytest.approx(sum(m.rank_samples_per_s), rel=0.1)
    # reported after each real epoch but the last (rank 0 sends the node's rate)
    assert len(outcome.intermediate) == len(m.sub_window_samples_per_s) - 1
    _no_leftovers()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "kind", "words"),
    [
        ("faulty.SegfaultsOnRank1", "rank_died", "rank 1 of 2 killed by SIGSEGV"),
        ("faulty.RaisesOnRank1", "error", "rank 1: RuntimeError: rank 1 refuses this batch"),
    ],
)
def test_a_rank_that_fails_ends_the_trial_with_its_failure(source, model, kind, words):
    outcome = run_trial(job(source, target=model, ranks=2), timeout_s=120)
    assert outcome.status == "failed"
    assert outcome.failure.kind == kind and words in outcome.failure.message, outcome.failure
    _no_leftovers()


@pytest.mark.slow
def test_a_rank_that_hangs_is_a_timeout_and_every_rank_is_reaped(source):
    outcome = run_trial(job(source, target="faulty.HangsOnRank1", ranks=2), timeout_s=15)
    assert outcome.status == "failed" and outcome.failure.kind == "timeout"
    _no_leftovers()


@pytest.mark.slow
def test_ctrl_c_during_a_two_rank_trial_takes_every_rank_down(source):
    stop = threading.Event()

    def press_ctrl_c(index: int, value: float) -> bool:
        stop.set()  # what the tuner's SIGINT handler does, mid-window
        return False

    outcome = run_trial(
        job(source, workers=1, ranks=2), timeout_s=120, should_prune=press_ctrl_c, stop=stop
    )
    assert outcome.status == "failed" and outcome.failure.kind == "interrupted"
    _no_leftovers()


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)
def test_two_ranks_on_two_gpus_measure_the_node_with_nccl(source):
    """One GPU per rank, NCCL's all-reduce in each step."""
    outcome = run_trial(job(source, workers=1, ranks=2, device="cuda"), timeout_s=180)
    assert outcome.status == "ok", outcome.failure
    m = outcome.measurement
    assert len(m.rank_samples_per_s) == 2 and m.gpu_peak_memory_bytes
    _no_leftovers()


def _step_on_rank(rank: int, store_path: str, lightning: bool, out: Any) -> None:
    """One rank of two: one step of TrainStep in DistributedDataParallel on a batch of its
    own; sends back its parameters after the step."""
    import torch.distributed as dist
    from lightning_example import ToneModule
    from userdata_example import spectrograms

    from autotune.runtime.workload import TinyCNN, TrainStep

    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)
    torch.manual_seed(0)  # the same model on both ranks, as DDP starts from
    model = ToneModule() if lightning else TinyCNN(num_classes=2)
    step = TrainStep(model, torch.device("cpu"), lr=0.1, distributed=True)
    torch.manual_seed(1 + rank)  # a batch of its own
    if lightning:
        from userdata_example import pad_dict_collate

        data = spectrograms(8)
        batch = pad_dict_collate([data[i] for i in range(4 * rank, 4 * rank + 4)])
    else:
        batch = (torch.rand(4, 3, 32, 32), torch.randint(0, 2, (4,)))
    step(batch)
    # as numpy arrays: a tensor would cross as a shared-memory handle that dies with this process
    out.send([p.detach().numpy().copy() for p in step.module.parameters()])
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("lightning", [False, True])
def test_a_step_of_several_ranks_all_reduces_the_gradients(tmp_path, lightning):
    """Two ranks, two different batches, one step each: the parameters agree after it (the
    gradients were averaged), as in a DDP job. A LightningModule's training_step too."""
    ctx = multiprocessing.get_context("forkserver")
    pipes = [ctx.Pipe() for _ in range(2)]
    store = str(tmp_path / "store")
    procs = [
        ctx.Process(target=_step_on_rank, args=(r, store, lightning, pipes[r][1]))
        for r in range(2)
    ]
    for p in procs:
        p.start()
    zero, one = (pipes[r][0].recv() for r in range(2))
    for p in procs:
        p.join(30)
    assert all((a == b).all() for a, b in zip(zero, one, strict=True))
