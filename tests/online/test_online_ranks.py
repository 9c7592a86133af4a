"""Tests for autotune.online.ranks: the node's reading from the ranks' own; and two real
torch.distributed ranks (gloo, two processes), each with its autotune.DataLoader over its
DistributedSampler share, deciding together: rank 0 explores for both, both switch at the
same batches, and each reads its share of every epoch once, in torch's batches; and under
Lightning's Trainer, which re-creates the loader with its DistributedSampler on each rank."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
import torch.distributed as dist
from helpers import BRIEF_WINDOW
from torch.utils.data import DataLoader, Dataset, DistributedSampler, get_worker_info

import autotune
from autotune.online import job_record
from autotune.online.note import Kept
from autotune.online.ranks import Decision, Ranks, node_reading
from autotune.online.reading import Reading
from autotune.pipeline import best_file
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.tuner.store import StudyKey, TrialKey

N, RANKS, EPOCHS = 70, 2, 6  # 35 a rank: 9 batches of 4, the last of 3
START = PipelineConfig(decoder=AS_IS)
LIVE: list[DataLoader] = []


def test_the_node_adds_the_ranks_rates_and_takes_the_worst_of_the_rest() -> None:
    zero = Reading(START, 100.0, 0.02, 0.1, 0.3, 10, 1.0, 0.04, 0.01, cpu_s=0.5)
    one = Reading(START, 80.0, 0.05, 0.4, 0.2, 8, 1.2, 0.06, 0.01, cpu_s=0.7)
    node = node_reading([zero, one])
    # a sample's wall and CPU in the loaders, and the CPU used: their means (the ranks read
    # one storage, each on its share of the CPUs)
    assert node == Reading(START, 180.0, 0.05, 0.4, 0.3, 10, 1.0, 0.05, 0.01, cpu_s=0.6)
    other = Reading(START.switched_to(PipelineConfig(num_workers=2)), 90.0, 0, 0, 0, 9, 1.0)
    assert node_reading([zero, other]) is None  # not one setting: no reading of the node


class Work(Dataset):
    """Items that take a little computing, so that workers change the rate."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> torch.Tensor:
        x = torch.full((48, 48), float(index))
        for _ in range(10):
            x = torch.tanh(x @ torch.eye(48))
        return torch.tensor(index)


def _sampler(rank: int) -> DistributedSampler:
    return DistributedSampler(Work(), num_replicas=RANKS, rank=rank, shuffle=True, seed=5)


def _epochs(
    loader: DataLoader, sampler: DistributedSampler, epochs: int = EPOCHS
) -> list[list[list[int]]]:
    read = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        read.append([batch.tolist() for batch in loader])
    return read


class DiesOnRankOne(Work):
    """On rank 1 only, a worker really dies (SIGKILL): every setting with workers fails
    there, and works on rank 0."""

    def __getitem__(self, index: int) -> torch.Tensor:
        if get_worker_info() is not None and os.environ["RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


def _rank_main(
    rank: int, rendezvous: str, storage: str, data: type, run: tuple[float, int], out: Connection
) -> None:
    tune, epochs = run
    torch.set_num_threads(1)
    os.environ["RANK"] = str(rank)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        sampler = _sampler(rank)
        loader = autotune.DataLoader(
            data(), batch_size=4, sampler=sampler, tune=tune, window=BRIEF_WINDOW, storage=storage
        )
        read = _epochs(loader, sampler, epochs)
        LIVE.append(loader)  # as a script's loader, alive until its process ends
        switches = [(s.epoch, s.at_batch, s.settings, s.fell_back) for s in loader.switches]
        out.send((read, switches, loader.explorer is not None, loader.settings))
    except BaseException as exc:
        out.send(exc)
        raise
    finally:
        dist.destroy_process_group()


def _run_ranks(
    tmp_path: Path, storage: str, data: type = Work, tune: float = 2.0, epochs: int = EPOCHS
) -> list[Any]:
    ctx = multiprocessing.get_context("fork")
    rendezvous = tmp_path / f"rendezvous-{len(list(tmp_path.glob('rendezvous-*')))}"
    procs, links = [], []
    for rank in range(RANKS):
        here, there = ctx.Pipe()
        proc = ctx.Process(
            target=_rank_main, args=(rank, str(rendezvous), storage, data, (tune, epochs), there)
        )
        proc.start()
        procs.append(proc)
        links.append(here)
    try:
        results = []
        for rank, link in enumerate(links):
            assert link.poll(180), f"rank {rank} sent nothing"
            result = link.recv()
            if isinstance(result, BaseException):
                raise AssertionError(f"rank {rank} failed") from result
            results.append(result)
        return results
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()


@pytest.mark.slow  # two rank processes and their workers, through several settings
def test_two_ranks_explore_once_switch_together_and_read_each_share_once(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    results = _run_ranks(tmp_path, storage)
    for rank, (epochs, *_) in enumerate(results):
        sampler = _sampler(rank)
        assert epochs == _epochs(DataLoader(Work(), batch_size=4, sampler=sampler), sampler)
    for epoch in range(EPOCHS):  # together: every index once an epoch (the padding aside)
        read = sorted(i for epochs, *_ in results for batch in epochs[epoch] for i in batch)
        assert set(read) == set(range(N)) and len(read) == N

    (_, switches_0, explored_0, kept_0), (_, switches_1, explored_1, kept_1) = results
    assert switches_0 and switches_0 == switches_1  # the same settings, at the same batches
    assert any(at for _, at, _, _ in switches_0)  # within epochs, not only at their starts
    assert explored_0 and not explored_1 and kept_0 == kept_1

    # recorded once, by rank 0, in a study of its own: the node's job is not one rank's
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    run = [t for t in study.trials if t.state != optuna.trial.TrialState.WAITING]  # not queued
    assert len(run) >= 2 and {t.user_attrs[TrialKey.HOST] for t in run} == {
        run[0].user_attrs[TrialKey.HOST]
    }
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    recorded = PipelineConfig.from_dict(study.user_attrs[StudyKey.ONLINE_KEPT])
    assert recorded.short() in {t.user_attrs[TrialKey.CONFIG] for t in complete}
    # and its best.yaml, by rank 0: each rank's settings, read with the node's two
    written = best_file.read(tmp_path / summary.study_name / "best.yaml")
    assert written.as_is == recorded and written.ranks == 2

    # the next run of the node starts there on both ranks, exploring nothing (two epochs:
    # too few readings for a drift of its rate to show)
    again = _run_ranks(tmp_path, storage, epochs=2)
    for _, switches, explored, kept in again:
        assert not switches and not explored and kept == recorded


@pytest.mark.slow  # two rank processes, workers that really die on one of them
def test_a_setting_whose_workers_die_on_one_rank_fails_for_the_node(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    results = _run_ranks(tmp_path, storage, DiesOnRankOne)
    for rank, (epochs, *_) in enumerate(results):  # nothing lost where a switch failed
        sampler = _sampler(rank)
        assert epochs == _epochs(DataLoader(Work(), batch_size=4, sampler=sampler), sampler)
    (_, switches_0, *_), (_, switches_1, *_) = results
    assert any(fell_back for *_, fell_back in switches_1)  # rank 1 went back on its own
    assert not any(fell_back for *_, fell_back in switches_0)

    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed and all(t.user_attrs[TrialKey.FAILURE] for t in failed)
    recorded = PipelineConfig.from_dict(study.user_attrs[StudyKey.ONLINE_KEPT])
    assert recorded.num_workers == 0  # what works on every rank


@pytest.mark.slow  # two rank processes, workers that really die on one of them
def test_a_kept_setting_whose_workers_die_on_one_rank_sends_every_rank_back_to_yours(
    tmp_path, monkeypatch
) -> None:
    """An earlier run kept `w1`; its workers die on rank 1, which falls back to your
    settings alone. Rank 0 used to drop the kept setting and stay on it: the ranks read
    with different settings from there, every reading of the node was none, and nothing
    was explored. Now its decision sends every rank back to yours, and they explore."""
    kept = dataclasses.replace(START, num_workers=1, prefetch_factor=2, main_threads=1)
    kept = dataclasses.replace(kept, batch_size=4)
    monkeypatch.setattr(job_record.JobRecord, "start", lambda self: Kept(kept))  # forked
    storage = f"sqlite:///{tmp_path}/autotune.db"
    results = _run_ranks(tmp_path, storage, DiesOnRankOne)
    for rank, (epochs, *_) in enumerate(results):  # nothing lost where a switch failed
        sampler = _sampler(rank)
        assert epochs == _epochs(DataLoader(Work(), batch_size=4, sampler=sampler), sampler)
    (_, _, explored_0, settings_0), (_, _, _, settings_1) = results
    assert explored_0 and settings_0 == settings_1 and settings_0.num_workers == 0


class _Leader:
    """Rank 0's side of the syncs, scripted: it asks every rank to read with ``START``."""

    def __init__(self) -> None:
        self.told: list[Reading] = []

    def fail(self, settings: PipelineConfig, failure: Any) -> None:
        raise AssertionError("nothing failed")

    def explore(self, reading: Reading) -> None:
        self.told.append(reading)

    def decision(self) -> Decision:
        return Decision(START, 1.0)


def _as_rank(rank: int, rendezvous: str, out: Connection, read: Callable[[], Any]) -> None:
    """``read()`` in rank ``rank`` of a gloo group of two, as torchrun starts it (one thread):
    what it returns, or what it raised, sent on ``out``."""
    torch.set_num_threads(1)
    os.environ["RANK"] = str(rank)
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2
        )
        out.send(read())
        dist.destroy_process_group()
    except BaseException as exc:
        out.send(exc)
        raise


def _settles_apart_main(rank: int, rendezvous: str, storage: str, out: Connection) -> None:
    """Rank 1 settles a reading of ``START`` before the first sync, rank 0 after it; the
    first sync's decision is the settings they read with already. Rank 0 sends what its
    leader was told."""

    def read() -> list[float] | None:
        ranks, leader = Ranks(None, rank, 2, 2), _Leader() if rank == 0 else None
        reading = Reading(START, 100.0 + rank, 0.01, 0.0, 0.0, batches=10, seconds=1.0)
        if rank == 1:
            ranks.measured(reading)
        ranks.sync(leader)  # type: ignore[arg-type]
        if rank == 0:
            ranks.measured(reading)
        ranks.sync(leader)  # type: ignore[arg-type]
        return [r.samples_per_s for r in leader.told] if leader else None

    _as_rank(rank, rendezvous, out, read)


@pytest.mark.slow  # two rank processes
def test_a_reading_settled_before_a_sync_that_switches_nothing_waits_for_the_other_rank(
    tmp_path,
) -> None:
    """A decision naming the settings every rank reads with already is no switch: rank 1's
    reading waits for rank 0's, and the node is read from both. It used to be dropped at
    every such sync (each epoch's start while exploring), and rank 1 measured again."""
    told, _ = _sent_by_each_rank(tmp_path, _settles_apart_main)
    assert told == [201.0]  # the node's: both ranks' rates added


class Staged(Work):
    """Each sample with the stage the loop sets between epochs: workers that persist would
    read a stale copy."""

    stage = 0

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.stack([super().__getitem__(index), torch.tensor(self.stage)])


def _renews_main(rank: int, rendezvous: str, storage: str, out: Connection) -> None:
    """Both ranks set the stage before each epoch; each sends the stages it read."""

    def read() -> tuple[list[set[int]], PipelineConfig]:
        sampler, data = _sampler(rank), Staged()
        loader = autotune.DataLoader(
            data, batch_size=4, sampler=sampler, num_workers=1, window=BRIEF_WINDOW,
            storage=storage,
        )  # fmt: skip
        stages = []
        for epoch in range(4):
            sampler.set_epoch(epoch)
            data.stage = epoch
            stages.append({int(stage) for batch in loader for stage in batch[:, 1]})
        return stages, loader.settings

    _as_rank(rank, rendezvous, out, read)


@pytest.mark.slow  # two rank processes
def test_ranks_started_at_workers_that_persist_read_the_dataset_their_loop_changes(
    tmp_path, monkeypatch
) -> None:
    """An earlier run kept `w1 persist`; this loop sets its Dataset's stage between epochs
    (its own `w1` does not persist). From the first change, every rank reads with the
    setting's twin whose workers do not persist, each epoch its own stage. Rank 0 used to
    decide nothing: the ranks read on with workers that persisted in name only (shut down
    each epoch), and an explorer made from such a reading refused its own start."""
    kept = dataclasses.replace(START, num_workers=1, prefetch_factor=2, main_threads=1)
    kept = dataclasses.replace(kept, persistent_workers=True, batch_size=4)
    monkeypatch.setattr(job_record.JobRecord, "start", lambda self: Kept(kept))  # forked
    for stages, settings in _sent_by_each_rank(tmp_path, _renews_main):
        assert stages == [{0}, {1}, {2}, {3}] and not settings.workers_persist


class Indexed(Work):
    """The index, with a feature to learn from."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return super().__getitem__(index).float().unsqueeze(0), torch.tensor(index)


def _lightning_parts() -> tuple[type, type]:
    """The DataModule and the LightningModule of the test: Lightning imported where it runs,
    not where the tests are collected (every pytest-xdist process collects them all)."""
    import lightning as L

    class IndexedData(L.LightningDataModule):
        def __init__(self, storage: str) -> None:
            super().__init__()
            self.storage = storage

        def train_dataloader(self) -> autotune.DataLoader:
            return autotune.DataLoader(
                Indexed(),
                batch_size=4,
                shuffle=True,
                tune=2.0,
                window=BRIEF_WINDOW,
                storage=self.storage,
            )

    class Recorder(L.LightningModule):
        """Keeps the indices of each batch it trains on; at the end, with what its loader did,
        in ``rank<N>.json`` of ``out``."""

        def __init__(self, out: Path) -> None:
            super().__init__()
            self.head, self.out, self.seen = torch.nn.Linear(1, 1), out, []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            features, indices = batch
            self.seen.append((self.current_epoch, indices.tolist()))
            return self.head(features).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def on_train_end(self) -> None:
            loader = self.trainer.train_dataloader
            done = {
                "autotune": isinstance(loader, autotune.DataLoader),
                "sampler": type(loader.sampler).__name__,
                "switches": [(s.epoch, s.at_batch, s.settings.short()) for s in loader.switches],
                "explored": loader.explorer is not None,
                "epoch_length": [loader.epoch_length, len(loader)],
                "seen": self.seen,
            }
            (self.out / f"rank{self.global_rank}.json").write_text(json.dumps(done))

    return IndexedData, Recorder


def _fit(out: Path, devices: int, reload: int = 0) -> None:
    """Lightning's fit on ``devices`` CPU ranks (forked by it for more than one), the loaders
    made anew each ``reload`` epochs (0: made once)."""
    import lightning as L

    IndexedData, Recorder = _lightning_parts()  # noqa: N806  # classes, named as classes
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp_fork" if devices > 1 else "auto",
        max_epochs=EPOCHS,
        reload_dataloaders_every_n_epochs=reload,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Recorder(out), datamodule=IndexedData(f"sqlite:///{out}/autotune.db"))


def _fit_apart(out: Path, devices: int, reload: int = 0) -> None:
    """``_fit`` in a fresh process: autograd refuses a fork where it has run threads, as
    another test in this process may have had it do."""
    fit = multiprocessing.get_context("spawn").Process(target=_fit, args=(out, devices, reload))
    fit.start()
    fit.join(300)
    assert fit.exitcode == 0


@pytest.mark.slow  # Lightning's Trainer, two ranks forked by it
@pytest.mark.parametrize("devices", [1, 2])
def test_lightning_re_creates_it_for_its_ranks_and_they_tune_together(tmp_path, devices) -> None:
    if devices == 1:
        _fit(tmp_path, devices)
    else:
        _fit_apart(tmp_path, devices)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(devices)]
    for epoch in range(EPOCHS):  # each index once an epoch, the ranks' shares together
        read = [i for rank in ranks for e, batch in rank["seen"] if e == epoch for i in batch]
        assert sorted(read) == list(range(N))
    # the loader Lightning re-created with its DistributedSampler is still autotune's
    sampler = "DistributedSampler" if devices > 1 else "RandomSampler"
    assert all(rank["autotune"] and rank["sampler"] == sampler for rank in ranks)
    assert ranks[0]["switches"] and all(r["switches"] == ranks[0]["switches"] for r in ranks)
    assert [rank["explored"] for rank in ranks] == [True] + [False] * (devices - 1)
    assert all(rank["epoch_length"][0] == rank["epoch_length"][1] for rank in ranks)  # its own


@pytest.mark.slow  # Lightning's Trainer, two ranks forked by it
def test_lightning_s_ranks_reloading_their_loaders_each_epoch_tune_together(tmp_path) -> None:
    """``reload_dataloaders_every_n_epochs=1`` under DDP: each rank's loader made anew each
    epoch (and re-created by Lightning with its DistributedSampler); rank 0's exploration goes
    on across them, every index read once an epoch."""
    _fit_apart(tmp_path, 2, reload=1)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in range(EPOCHS):
        read = [i for rank in ranks for e, batch in rank["seen"] if e == epoch for i in batch]
        assert sorted(read) == list(range(N))
    storage = f"sqlite:///{tmp_path}/autotune.db"
    (name,) = optuna.get_all_study_names(storage)
    trials = optuna.load_study(study_name=name, storage=storage).trials
    settings = {t.user_attrs.get(TrialKey.CONFIG) for t in trials if t.state.name == "COMPLETE"}
    assert len(settings) >= 2  # a setting measured by one epoch's loaders, another by a later
    assert not [t for t in trials if t.user_attrs.get("failure", {}).get("kind") == "abandoned"]


# autotune.DataLoader first used in a LightningDataModule's train_dataloader(), as in a script
# that imports autotune at its top: its class is made while Lightning watches what is set on
# loaders, Lightning re-creates the loader from torch's arguments alone, then sets on the new
# one what was set on the old (here read from once in the hook, as a script may to check it)
_RE_CREATED = """
import dataclasses, torch.utils.data
from lightning.fabric.utilities.data import _replace_dunder_methods, _update_dataloader
import autotune
from autotune.schema import WindowConfig
window = dataclasses.replace(WindowConfig(), sub_windows=2)
with _replace_dunder_methods(torch.utils.data.DataLoader, "dataset"):
    old = autotune.DataLoader(
        list(range(40)), batch_size=2, shuffle=True, tune=2.0, window=window, storage="{storage}"
    )
    next(iter(old))
sampler = torch.utils.data.DistributedSampler(list(range(40)), num_replicas=2, rank=1)
new = _update_dataloader(old, sampler)
read = sorted(i for batch in new for i in batch.tolist())
print(new.epoch_length, len(new), read == sorted(sampler), new.tuning is not old.tuning,
      (new.tune, new.window, new.storage) == (2.0, window, "{storage}"),
      new.tuning.share, new.tuning.start.job.job.storage == "{storage}", new.epochs)
"""


@pytest.mark.slow  # Lightning imported
def test_a_loader_made_outside_a_hook_is_re_created_with_its_arguments(tmp_path) -> None:
    from lightning.fabric.utilities.data import _update_dataloader

    storage, window = f"sqlite:///{tmp_path}/autotune.db", BRIEF_WINDOW
    old = autotune.DataLoader(Work(), batch_size=4, tune=2.0, window=window, storage=storage)
    # Lightning reads the arguments back from the attributes named like its parameters
    new = _update_dataloader(old, _sampler(rank=1))
    assert isinstance(new, autotune.DataLoader) and isinstance(new.sampler, DistributedSampler)
    assert (new.tune, new.window, new.storage) == (2.0, window, storage)
    assert new.epoch_length == len(new) == 9  # its share: 35 samples in batches of 4
    next(iter(new))
    assert new.tuning is not None and new.tuning.share == 2.0
    assert new.tuning.start.job is not None and new.tuning.start.job.job.storage == storage


@pytest.mark.slow  # a fresh interpreter, where autotune's class is made after Lightning's patch
def test_a_loader_lightning_re_creates_keeps_the_arguments_not_the_state_of_the_old(
    tmp_path,
) -> None:
    script = _RE_CREATED.format(storage=f"sqlite:///{tmp_path}/autotune.db")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    # the new loader's own length, tuning and batches (its share), with the old's arguments
    assert run.stdout.split() == ["10", "10", "True", "True", "True", "2.0", "True", "1"]


@pytest.mark.slow  # two rank processes
def test_a_rank_process_that_ends_while_exploring_leaves_no_trial_running(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path}/autotune.db"
    _run_ranks(tmp_path, storage, tune=1000.0, epochs=2)  # ends long before its budget
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    # its process ends as multiprocessing's do, without atexit: still recorded as stopped
    assert all(t.state != optuna.trial.TrialState.RUNNING for t in trials)
    (stopped,) = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert stopped.user_attrs[TrialKey.FAILURE]["kind"] == "interrupted"


def _twice_main(rank: int, rendezvous: str, storage: str, out: Connection) -> None:
    """Two process groups in turn in one process, as two fits of a Trainer make them."""
    torch.set_num_threads(1)
    try:
        kept = []
        for turn in range(2):
            init = f"file://{rendezvous}-{turn}"
            dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
            sampler = _sampler(rank)
            loader = autotune.DataLoader(
                Work(),
                batch_size=4,
                sampler=sampler,
                tune=2.0,
                window=BRIEF_WINDOW,
                storage=storage,
            )
            _epochs(loader, sampler, 3)
            kept.append(loader.settings)
            dist.destroy_process_group()
        out.send(kept)
    except BaseException as exc:
        out.send(exc)
        raise


def _sent_by_each_rank(tmp_path: Path, main: Callable[..., None]) -> list[Any]:
    """Runs ``main(rank, rendezvous, storage, out)`` in a process a rank; what each sent."""
    ctx = multiprocessing.get_context("fork")
    links, procs = [], []
    for rank in range(RANKS):
        here, there = ctx.Pipe()
        args = (rank, str(tmp_path / "rendezvous"), f"sqlite:///{tmp_path}/autotune.db", there)
        procs.append(ctx.Process(target=main, args=args))
        procs[-1].start()
        links.append(here)
    try:
        sent = []
        for rank, link in enumerate(links):
            assert link.poll(120), f"rank {rank} is still waiting"
            sent.append(link.recv())
            assert not isinstance(sent[-1], BaseException), sent[-1]
        return sent
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()


@pytest.mark.slow  # two rank processes
def test_a_process_group_made_again_in_the_same_processes_gets_its_own_meetings(tmp_path) -> None:
    for kept in _sent_by_each_rank(tmp_path, _twice_main):
        assert len(kept) == 2  # the second group met: it started at what the first kept


def _validates_on_rank_0_main(rank: int, rendezvous: str, storage: str, out: Connection) -> None:
    """Both ranks train on their shares; rank 0 alone reads a validation loader (no
    DistributedSampler), then both meet at a barrier, as scripts validate."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        sampler = _sampler(rank)
        train = autotune.DataLoader(
            Work(), batch_size=4, sampler=sampler, tune=2.0, window=BRIEF_WINDOW, storage=storage
        )
        validation = autotune.DataLoader(
            Work(), batch_size=8, window=BRIEF_WINDOW, storage=storage
        )
        validated = 0
        for epoch in range(2):
            sampler.set_epoch(epoch)
            sum(1 for _ in train)
            if rank == 0:
                validated += sum(len(batch) for batch in validation)
            dist.barrier()
        out.send(validated)
    except BaseException as exc:
        out.send(exc)
        raise
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two rank processes
def test_a_loader_rank_0_reads_alone_tunes_on_its_own_and_no_rank_waits_for_it(tmp_path) -> None:
    validated = _sent_by_each_rank(tmp_path, _validates_on_rank_0_main)
    assert validated == [2 * len(Work()), 0]


def _anew_main(rank: int, rendezvous: str, storage: str, out: Connection) -> None:
    """Both ranks make their loader anew each epoch; each sends the indices it read, the
    settings of each epoch's batches, and (rank 0) each loader's explorer, as an id."""

    def read() -> tuple[list[list[int]], list[list[PipelineConfig]], list[int | None]]:
        sampler = _sampler(rank)
        indices, settings, explorers = [], [], []
        for epoch in range(8):
            sampler.set_epoch(epoch)
            loader = autotune.DataLoader(
                Work(), batch_size=4, sampler=sampler, tune=10.0, window=BRIEF_WINDOW,
                storage=storage,
            )  # fmt: skip
            read, at = [], []
            for batch in loader:
                read.extend(batch.tolist())
                at.append(loader.settings)
            indices.append(read)
            settings.append(at)
            explorers.append(id(loader.explorer) if loader.explorer is not None else None)
            del loader
        return indices, settings, explorers

    _as_rank(rank, rendezvous, out, read)


@pytest.mark.slow  # two rank processes, a loader each epoch on each
def test_ranks_that_make_their_loaders_anew_go_on_together(tmp_path, caplog) -> None:
    (indices_0, settings_0, explorers_0), (indices_1, settings_1, _) = _sent_by_each_rank(
        tmp_path, _anew_main
    )
    for epoch, (zero, one) in enumerate(zip(indices_0, indices_1, strict=True)):
        sampler = _sampler(0)
        sampler.set_epoch(epoch)
        assert zero == list(sampler)
        assert sorted(set(zero) | set(one)) == list(range(N))
    assert settings_0 == settings_1  # every batch of every epoch read with the same settings
    going_on = [e for e in explorers_0 if e is not None]
    assert len(going_on) >= 2 and len(set(going_on)) == 1  # one exploration, gone on with
    storage = f"sqlite:///{tmp_path}/autotune.db"
    (name,) = optuna.get_all_study_names(storage)
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert len({t.user_attrs[TrialKey.CONFIG] for t in trials if t.state.name == "COMPLETE"}) >= 2
    assert not [t for t in trials if t.user_attrs.get("failure", {}).get("kind") == "abandoned"]
