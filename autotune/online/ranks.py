"""Several ranks of one job deciding their loader settings together: under torchrun each rank
has its own ``autotune.DataLoader`` over its share of the data, in the process group the user
initialised.

Rank 0 decides. Only it explores and records; every rank measures its own share of the node's
work and sends what it measured. At the batches the ranks agree on (a sync: each epoch's
start, and every few batches within it where every rank's epoch has the same length), they
gather what each measured since the last sync; rank 0 combines it into the node's reading
(``node_reading``) and tells its explorer, and its decision, the settings to read with from
that batch on, goes to every rank. So every rank switches at the same batch, and no rank waits
at a collective on another's restart more than once per switch. A rank whose switch failed
falls back at once on its own, and says so at the next sync; rank 0 then records the failure
and decides for all.

The syncs travel over a gloo group of their own (made at the first loader's first epoch on
every rank, once for each process group the user initialises): they never interleave with the
training's own collectives, whatever its backend, and NCCL's device tensors are never needed.
They go on while the run tunes (once settled, rank 0 watches the node's rate for a drift);
with ``AUTOTUNE=off`` the ranks meet once, before the first batch.

Example (on each rank of ``torchrun --nproc-per-node 2 train.py``):
    >>> torch.distributed.init_process_group("gloo")
    >>> sampler = DistributedSampler(dataset)
    >>> loader = autotune.DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

import torch.distributed as dist
import torch.utils.data
from torch.utils.data import DistributedSampler

from autotune.online.passes import Passes
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure

SYNC_S = 0.5  # within an epoch, a sync about every this many seconds of rank 0's batches,
SYNCS_PER_EPOCH = 4  # and at least this many times an epoch
# the user's process group, and the syncs' own gloo group made in it
_made_in: tuple[object, dist.ProcessGroup] | None = None


class Row(NamedTuple):
    """What one rank sends at a sync."""

    reading: Reading | None  # a settled reading of its share, since it last sent one
    failed: tuple[PipelineConfig, Failure | None] | None  # settings that failed here, and why
    batches: int | None = None  # at the start: its epoch's length (None: a stream)


class Decision(NamedTuple):
    """What rank 0 sends back."""

    settings: PipelineConfig | None  # read with these from this batch on (None: as they are)
    share: float  # the exploring budget (``tune``); 0: the run explores nothing, no more syncs
    every: int = 0  # batches to the next sync within the epoch (0: only at epochs' starts)
    anew: Passes | None = None  # at the start: the loop made the loaders anew, read so


class Leader(Protocol):
    """What rank 0's loader does with what the ranks measured."""

    def explore(self, reading: Reading) -> None: ...  # a setting's node reading, settled

    def fail(self, settings: PipelineConfig, failure: Failure | None) -> None: ...  # they failed

    def decision(self) -> Decision: ...  # what every rank reads with next


def node_reading(readings: list[Reading]) -> Reading | None:
    """The node's reading of one setting from each rank's reading of its share: the ranks'
    samples/s added (they run in lockstep: each step all-reduces), the worst rank's spread,
    data wait, first batch and epoch start, their loaders' mean wall and CPU a sample; None
    where the ranks measured different settings."""
    first = readings[0]
    if any(r.settings != first.settings for r in readings):
        return None
    return Reading(
        settings=first.settings,
        samples_per_s=sum(r.samples_per_s for r in readings),
        spread=max(r.spread for r in readings),
        data_wait=max(r.data_wait for r in readings),
        first_batch_s=max(r.first_batch_s for r in readings),
        epoch_start_s=max(r.epoch_start_s for r in readings),
        batches=first.batches,  # a rank's: the explorer's epoch is a rank's epoch
        seconds=first.seconds,
        sample_wall_s=sum(r.sample_wall_s for r in readings) / len(readings),  # one storage
        sample_cpu_s=sum(r.sample_cpu_s for r in readings) / len(readings),
        sample_queued_s=sum(r.sample_queued_s for r in readings) / len(readings),
        cpu_s=sum(r.cpu_s for r in readings) / len(readings),  # each of its share of the CPUs
    )


def reads_a_share(loader: torch.utils.data.DataLoader) -> bool:
    """Whether ``loader`` reads this rank's share of the data, as every rank's loader does
    at the same batches: over a ``DistributedSampler`` (in a batch sampler too), or a stream
    (which shards itself). Any other, a validation loader that rank 0 reads alone, say,
    tunes on its rank alone: the ranks would wait on each other's meetings for good."""
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return True
    samplers = (loader.sampler, getattr(loader.batch_sampler, "sampler", None))
    return any(isinstance(sampler, DistributedSampler) for sampler in samplers)


class Ranks:
    """This rank's side of the syncs: when they come, and the messages they carry."""

    def __init__(self, group: dist.ProcessGroup | None, rank: int, world: int, local: int) -> None:
        self._group, self.rank, self.world = group, rank, world
        self.local = local  # ranks on this node: they share its CPUs
        self.syncing = True
        self._epoch = 0  # batches in every rank's epoch (0: not the same: syncs at starts only)
        self._every = 0
        self._next_at = 0  # the epoch's batch the next sync comes before (0: none)
        self._paced: tuple[float, int] = (time.perf_counter(), 0)  # rank 0: last sync, batches
        self._batches = 0
        self._mine = Row(None, None)  # what this rank sends at the next sync
        self.agreed: PipelineConfig | None = None  # a switch agreed on, not made yet

    @classmethod
    def joined(cls, loader: torch.utils.data.DataLoader) -> Ranks | None:
        """This process's ranks where it is one of several in an initialised process group
        and ``loader`` reads its rank's share (``reads_a_share``); call at the same point on
        every rank: the first one makes the syncs' group."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        if not reads_a_share(loader):
            return None
        global _made_in
        if _made_in is None or _made_in[0] is not dist.group.WORLD:  # first, or made again
            _made_in = (dist.group.WORLD, dist.new_group(backend="gloo"))
        world = dist.get_world_size()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        return cls(_made_in[1], dist.get_rank(), world, local)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def start(
        self, loader: torch.utils.data.DataLoader, first: Callable[[], Decision]
    ) -> Decision:
        """Before ``loader``'s first batch: rank 0's starting settings and budget (``first``,
        called there) for every rank, and where the loop makes its loaders anew, how they are
        read (each rank's as rank 0's); syncs within epochs only where their lengths agree."""
        rows = self._gather(Row(None, None, loader.epoch_length))
        lengths = {row.batches for row in rows}
        self._epoch = lengths.pop() or 0 if len(lengths) == 1 else 0
        decision = self._agree(first if self.leader else None)
        if decision.anew is not None and not self.leader:
            loader.passes.follows(decision.anew, loader.epoch_length)  # type: ignore[attr-defined]
        return decision

    def due(self, delivered: int) -> bool:
        """Whether a sync comes before the epoch's batch ``delivered`` (counted from 0)."""
        self._batches += 1  # after its last batch, the next epoch's start syncs
        return self.syncing and delivered == self._next_at and delivered < self._epoch

    def measured(self, reading: Reading) -> None:
        """This rank's share settled: sent at the next sync (a later one replaces it)."""
        self._mine = self._mine._replace(reading=reading)

    def failed(self, settings: PipelineConfig, failure: Failure | None) -> None:
        """``settings``' workers failed here (this rank fell back): sent at the next sync."""
        self._mine = self._mine._replace(failed=(settings, failure))

    def take_agreed(self) -> PipelineConfig | None:
        """The switch the ranks agreed on at the last sync, once."""
        agreed, self.agreed = self.agreed, None
        return agreed

    def sync(self, leader: Leader) -> Decision:
        """Every rank's row gathered; rank 0 (its ``leader``) tells its explorer what they
        measured and decides; its decision, returned on every rank, is the switch to take."""
        rows = self._gather(self._mine)
        # a failure is told once; readings wait until every rank has one
        self._mine = Row(None if all(row.reading for row in rows) else self._mine.reading, None)

        def decide() -> Decision:
            failed = [row.failed for row in rows if row.failed is not None]
            readings = [row.reading for row in rows]
            if failed:
                leader.fail(*failed[0])
            elif all(readings):
                node = node_reading(readings)  # type: ignore[arg-type]
                if node is not None:
                    leader.explore(node)
            return leader.decision()

        decision = self._agree(decide if self.leader else None)
        self.agreed = decision.settings
        read = self._mine.reading  # what was read before a switch is told no more
        if decision.settings is not None and (read is None or read.settings != decision.settings):
            self._mine = Row(None, None)
        return decision

    def pass_ended(self, leader: Leader) -> None:
        """A loader made anew handed out its pass's last batch, the loop about to drop it: a
        sync there on every rank (their passes are as long), what each read told to rank 0,
        whose explorer the next loaders go on with."""
        if self.syncing and self._epoch:
            self.sync(leader)

    def epoch_started(self) -> None:
        """A new epoch: its first sync within it ``every`` batches in."""
        self._next_at = self._every

    def _agree(self, decide: Callable[[], Decision] | None) -> Decision:
        message: list[Decision | None] = [None]
        if decide is not None:
            message[0] = decide()._replace(every=self._pace() if self._epoch else 0)
        dist.broadcast_object_list(message, src=0, group=self._group)
        decision = message[0]
        assert decision is not None
        self.syncing = decision.share > 0
        self._every = decision.every
        self._next_at += decision.every
        return decision

    def _pace(self) -> int:
        """Rank 0: batches to the next sync, about ``SYNC_S`` at the rate since the last,
        and no more than an epoch's share (``SYNCS_PER_EPOCH``)."""
        now, batches = time.perf_counter(), self._batches
        (then, before), self._paced = self._paced, (now, batches)
        rate = (batches - before) / (now - then) if now > then and batches > before else 0.0
        return max(1, min(round(rate * SYNC_S), self._epoch // SYNCS_PER_EPOCH))

    def _gather(self, row: Row) -> list[Row]:
        rows: list[Row | None] = [None] * self.world
        dist.all_gather_object(rows, row, group=self._group)
        return rows  # type: ignore[return-value]
