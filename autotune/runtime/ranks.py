"""A trial of several ranks, started the way torchrun starts a DDP job, measured as the node.

The trial's process forks ``job.ranks`` rank processes. Each gets torchrun's environment
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``; ``OMP_NUM_THREADS`` at its
``main_threads``), joins one ``torch.distributed`` group (gloo on CPU, NCCL on CUDA with one
GPU per rank) and measures its own share: its DataLoader over its shard of each pass, the
model in DistributedDataParallel, so each step all-reduces the gradients. The ranks agree on
every decision of their windows and meet at each span (``runtime.peers``); the node's rate is
all ranks' samples over the same seconds.

Forked, the ranks stay in the trial's process group: a timeout or Ctrl-C takes all of them
and their workers down at once. A rank that fails or dies ends the trial with its failure
(the others, blocked on their next all-reduce, are taken down with it).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

import torch
import torch.distributed as dist

from autotune.runtime.child import measure
from autotune.runtime.failures import Failure, FailureKind, RankFailed, classify_signal, reported
from autotune.runtime.job import TrialJob
from autotune.runtime.measurement import Measurement
from autotune.runtime.peers import ProcessGroupPeers
from autotune.runtime.window import WindowStopped

log = logging.getLogger(__name__)

Report = Callable[[int, float], None]  # (sub-window index, node rate so far); may raise
ROOT_CAUSE_WAIT_S = 2.0  # after a rank's error, how long a rank's death may still explain it
GRACEFUL_END_S = 10.0  # for a rank that reported to shut its workers down


def measure_ranks(job: TrialJob, report: Report) -> Measurement:
    """Runs ``job`` as ``job.ranks`` ranks and returns the node's measurement. ``report``
    sees the node's rate after each sub-window (it may raise ``WindowStopped``: every rank
    stops there). A rank's failure is raised as ``RankFailed``."""
    ctx = multiprocessing.get_context("fork")  # nothing of torch has run here yet: safe
    procs, links = [], []
    ended = 0.0  # seconds a rank may take to end on its own: none after a failure
    with tempfile.TemporaryDirectory(prefix="autotune-ranks-") as rendezvous:
        try:
            for rank in range(job.ranks):
                here, there = ctx.Pipe()
                proc = ctx.Process(target=_rank_main, args=(job, rank, rendezvous, there))
                proc.start()
                there.close()
                procs.append(proc)
                links.append(here)
            measured = node_measurement(_gather(procs, links, report))
            ended = GRACEFUL_END_S
            return measured
        finally:
            for proc in procs:
                proc.join(ended)
                if proc.is_alive():
                    proc.kill()
                proc.join()


Procs = list[multiprocessing.process.BaseProcess]
Failed = list[tuple[float, Failure]]  # each rank's failure, at its clock (one for all ranks)


def _gather(procs: Procs, links: list[Connection], report: Report) -> list[Measurement]:
    """Each rank's measurement, rank 0's sub-windows relayed to ``report`` on the way."""
    results: dict[int, Measurement] = {}
    failed: Failed = []
    open_links = dict(enumerate(links))
    while len(results) < len(procs):
        sentinels = {procs[r].sentinel: r for r in range(len(procs)) if r not in results}
        ready = wait([*open_links.values(), *sentinels])
        for rank, link in list(open_links.items()):
            if link in ready:
                message = _receive(link)
                if message is None:
                    del open_links[rank]
                    continue
                _handle(rank, message, link, report, results, failed)
        ended = [r for s, r in sentinels.items() if s in ready and r not in results]
        if failed or any(r not in open_links or not open_links[r].poll() for r in ended):
            raise RankFailed(_root_cause(procs, open_links, failed))
    return [results[rank] for rank in range(len(procs))]


def _receive(link: Connection) -> Any:
    try:
        return link.recv()
    except (EOFError, OSError):
        return None


def _handle(
    rank: int,
    message: tuple[Any, ...],
    link: Connection,
    report: Report,
    results: dict[int, Measurement],
    failed: Failed,
) -> None:
    kind = message[0]
    if kind == "sub_window":  # rank 0 only: the node's rate so far
        try:
            report(message[1], message[2])
            link.send("go")
        except WindowStopped:
            link.send("prune")
    elif kind == "done":
        results[rank] = message[1]
    elif kind == "pruned":
        raise WindowStopped(message[1])
    else:
        failed.append(_failure_of(rank, message))


def _failure_of(rank: int, message: tuple[Any, ...]) -> tuple[float, Failure]:
    """A rank's ``("failed", kind, text, detail, at)``: when, and its failure."""
    _, kind, text, detail, at = message
    if detail:
        log.debug("rank %d failed:\n%s", rank, detail)
    return at, Failure(kind, f"rank {rank}: {text}")


def _root_cause(procs: Procs, open_links: dict[int, Connection], failed: Failed) -> Failure:
    """What ended the trial. A rank killed by a signal, first: the others' next all-reduce
    fails then, and their errors are only its echo. Else the rank's error that came first,
    by the clock all ranks share. The other ranks' word is awaited a little first."""
    deadline = time.monotonic() + ROOT_CAUSE_WAIT_S
    while open_links and time.monotonic() < deadline:
        ready = wait(list(open_links.values()), timeout=deadline - time.monotonic())
        for rank, link in list(open_links.items()):
            if link in ready:
                message = _receive(link)
                if message is None:
                    del open_links[rank]
                elif message[0] == "failed":
                    failed.append(_failure_of(rank, message))
    for proc in procs:
        proc.join(0.5 if proc.is_alive() else 0)
    killed = [r for r, p in enumerate(procs) if p.exitcode is not None and p.exitcode < 0]
    if killed:
        return _death(procs, killed[0])
    if failed:
        return min(failed, key=lambda item: item[0])[1]
    silent = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
    return (
        _death(procs, silent[0])
        if silent
        else Failure(FailureKind.RANK_DIED, "a rank ended early")
    )


def _death(procs: Procs, rank: int) -> Failure:
    proc = procs[rank]
    where = f"rank {rank} of {len(procs)}"
    if proc.exitcode is not None and proc.exitcode < 0:
        return classify_signal(-proc.exitcode, where, otherwise=FailureKind.RANK_DIED)
    return Failure(
        FailureKind.RANK_DIED, f"{where} exited with code {proc.exitcode} without a result"
    )


def _rank_main(job: TrialJob, rank: int, rendezvous: str, link: Connection) -> None:
    """One rank: torchrun's environment, the process group, then the rank's measurement."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(job.ranks),
        LOCAL_WORLD_SIZE=str(job.ranks),
        MASTER_ADDR="127.0.0.1",
    )
    if job.pipeline.main_threads:  # what torchrun users set; the child sets torch's too
        os.environ["OMP_NUM_THREADS"] = str(job.pipeline.main_threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one node: its ranks meet on loopback
    try:
        cuda = job.device == "cuda"
        if cuda:
            torch.cuda.set_device(rank)
        store = dist.FileStore(os.path.join(rendezvous, "store"), job.ranks)
        dist.init_process_group(
            "nccl" if cuda else "gloo", store=store, rank=rank, world_size=job.ranks
        )
        peers = ProcessGroupPeers(torch.device("cuda", rank) if cuda else None)

        def report(index: int, rate: float) -> None:
            node_rate = peers.total(rate)
            prune = False
            if rank == 0:
                link.send(("sub_window", index, node_rate))
                prune = link.recv() == "prune"
            if peers.any(prune):
                raise WindowStopped(index)

        link.send(("done", measure(job, report, peers=peers)))
    except WindowStopped as stop:
        link.send(("pruned", stop.args[0]))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, then it ends
        link.send(("failed", *reported(exc), time.monotonic()))
    finally:
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def node_measurement(per_rank: list[Measurement]) -> Measurement:
    """The node's figures from its ranks': their samples over the longest rank's timed
    seconds, each span's rates added (the spans started and ended at barriers: the same
    seconds on every rank), the slowest rank's data wait, start-up and epoch start."""
    first = per_rank[0]
    samples = [m.samples_per_s * m.timed_s for m in per_rank]
    seconds = max(m.timed_s for m in per_rank)
    cpu = [m.process_cpu_s_per_sample for m in per_rank]
    cpu_s = None if None in cpu else sum(c * n for c, n in zip(cpu, samples, strict=True))
    cpu_per_sample = cpu_s / sum(samples) if cpu_s is not None and sum(samples) else None
    gpu = [m.gpu_utilization_pct for m in per_rank]
    return Measurement(
        samples_per_s=sum(samples) / seconds if seconds > 0 else first.samples_per_s,
        sub_window_samples_per_s=_added(m.sub_window_samples_per_s for m in per_rank),
        data_wait_fraction=max(m.data_wait_fraction for m in per_rank),
        time_to_first_batch_s=max(m.time_to_first_batch_s for m in per_rank),
        warmup_batches=first.warmup_batches,
        timed_batches=sum(m.timed_batches for m in per_rank),
        gpu_peak_memory_bytes=_most(m.gpu_peak_memory_bytes for m in per_rank),
        gpu_utilization_pct=None if None in gpu else sum(gpu) / len(gpu),
        process_cpu_s_per_sample=cpu_per_sample,
        epoch_start_s=_most(m.epoch_start_s for m in per_rank),
        epoch_overhead_s=_most(m.epoch_overhead_s for m in per_rank),
        first_step_s=_most(m.first_step_s for m in per_rank),
        timed_compiles=max(m.timed_compiles for m in per_rank),
        settled_samples_per_s=_added(m.settled_samples_per_s for m in per_rank),
        grouped=first.grouped,
        whole_passes=first.whole_passes,
        timed_s=seconds,
        rank_samples_per_s=tuple(m.samples_per_s for m in per_rank),
        rank_data_wait_fraction=tuple(m.data_wait_fraction for m in per_rank),
    )


def _most(values: Any) -> Any:
    """The largest, or None where any rank has none."""
    values = list(values)
    return None if None in values else max(values)


def _added(rates: Any) -> tuple[float, ...]:
    """Span by span, the ranks' rates added: the node's."""
    return tuple(sum(column) for column in zip(*rates, strict=True))
