"""How a run of ``autotune.DataLoader`` tunes itself: where it starts, what each setting's
reading leads to, and what is recorded.

The loader (``loader``) reads each epoch's batches with its current settings, times them
(``meter``) and switches them between two batches when asked; this is what asks. At the first
epoch's start the run starts at the setting an earlier run of the job kept, and explores
nothing unless that setting's rate moves; else at the user's own settings (``run_start``).
Each settled reading goes to the explorer (``explorer``), whose proposal is the loader's
next switch, within the budget ``tune=`` gives (``budget``). A setting whose workers failed,
or that no epoch could time, is the explorer's to replace. Where several ranks decide
together (``ranks``), this is the ``Leader`` of their syncs: only rank 0's explores, on the
node's readings, and its decision is every rank's switch.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable

import torch
import torch.utils.data

from autotune.online import best_yaml, made_anew, record
from autotune.online.admission import starts_slowly
from autotune.online.budget import shares
from autotune.online.dataset_state import renewed_note
from autotune.online.explorer import Explorer
from autotune.online.meter import Meter
from autotune.online.ranks import Decision, Ranks
from autotune.online.reading import Reading
from autotune.online.run_start import RunStart
from autotune.online.space import stream_workers, unsplit_note
from autotune.online.switchable import Switchable
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure, FailureKind
from autotune.schema import WindowConfig

log = logging.getLogger("autotune.online.loader")
# a setting's workers failed: no longer a start (not one no epoch here can time, say)
UNTIMEABLE = FailureKind.UNTIMEABLE  # no epoch (or pass the loop leaves) can time it
WORKERS_FAILED = set(FailureKind) - {
    UNTIMEABLE,
    FailureKind.INVALID_CONFIG,
    FailureKind.OVER_BUDGET,
}
Loader = torch.utils.data.DataLoader


class Tuning:
    """One loader's decisions, from its first epoch's start to the run's end."""

    def __init__(
        self, loader: Switchable, tune: bool | float, storage: str, study: str | None,
        window: WindowConfig,
    ) -> None:  # fmt: skip
        self._loader_ref = weakref.ref(loader)  # it holds this: no cycle keeps it alive
        self._window = window
        # 0: nothing explored (off, or the study's storage failed while exploring)
        self.share, self._run_share = shares(tune)
        # tune=False: torch's loader with these arguments, nothing read or recorded
        self._record_at: tuple[str, str | None] | None = (storage, study) if tune else None
        self.start = RunStart()  # where the run starts: an earlier run's kept setting, say
        self.explorer: Explorer | None = None  # None before the first setting is measured
        self.ranks: Ranks | None = None  # several ranks deciding together: rank 0 for all
        self._dataset_renewed = False  # the loop changes its Dataset between epochs

    @property
    def _loader(self) -> Switchable:
        loader = self._loader_ref()
        assert loader is not None  # called by the loader, or by its ranks' syncs
        return loader

    @property
    def exploring(self) -> bool:
        """Whether settings are explored yet (each one's timing capped by the budget)."""
        return bool(self.share) and (self.explorer is None or not self.explorer.done)

    @property
    def best_rate(self) -> float | None:  # the budget's unit (None before the explorer has one)
        """The best rate measured so far, in batches/s."""
        return self.explorer.budget.best_rate if self.explorer is not None else None

    def rival(self, settings: PipelineConfig) -> float | None:
        """The rate a proposal of ``settings`` races (``meter``: stopped once clearly below):
        the best so far's; none for the run's own or kept setting, the best, or several ranks'."""
        explorer = self.explorer
        if explorer is None or explorer.settled or self.ranks is not None:
            return None
        best = explorer.best
        racing = settings == explorer.current and best is not None and best.settings != settings
        return best.samples_per_s if racing else None  # type: ignore[union-attr]

    def epoch_started(self, loader: torch.utils.data.DataLoader) -> None:
        """An epoch starts (``loader``'s, before its batches are drawn): the first decides
        where the run starts; while the ranks tune, each is a sync."""
        if self._record_at is not None:
            self._begin(loader, *self._record_at)
        elif self.ranks is not None and self.ranks.syncing:  # an epoch's start: agreed
            self.ranks.sync(self)
        if self.ranks is not None:
            self.ranks.epoch_started()

    def _begin(self, loader: torch.utils.data.DataLoader, storage: str, name: str | None) -> None:
        """Where the run starts (``run_start``): rank 0 reads it, and the budget, for all."""
        self._record_at = None
        self.ranks = ranks = Ranks.joined(loader)
        start = None
        if ranks is None or ranks.leader:
            world = ranks.world if ranks else 1
            start = self.start.resume(
                loader, storage, name, ranks=world, exploring=bool(self.share)
            )
            if self.start.taken_up is not None:  # the loop dropped the loader exploring
                self._explores(self.start.taken_up)
        if ranks is not None:  # rank 0's start and budget, and its loaders made anew, for all
            anew = self._loader.passes if self.start.made_anew else None
            first = ranks.start(loader, lambda: Decision(start, self.share, anew=anew))
            start, self.share = first.settings, first.share
            self.start.made_anew = first.anew is not None
        if start is not None or self.start.made_anew:  # a loader made anew reads in one epoch
            self._loader.start_at(start or self._loader.own, made_anew=self.start.made_anew)

    def before_batch(self, delivered: int) -> None:
        """Before the epoch's batch ``delivered`` (counted): several ranks agree, if due."""
        if self.ranks is not None and self.ranks.due(delivered):
            self.ranks.sync(self)

    def take_request(self, *, epoch_done: bool = False) -> PipelineConfig | None:
        """The switch to make at the next batch: the loader's own, or the ranks' agreed.
        Where the epoch has no batch left (``epoch_done``), one to workers that do not
        persist waits for the next epoch's start: they would start, shut down and start again."""
        ranks = self.ranks
        asked = ranks.take_agreed() if ranks is not None else self._loader.asked()
        if not (epoch_done and asked and asked.num_workers and not asked.workers_persist):
            return asked
        if ranks is not None:  # every rank's epoch is as long: each waits alike
            ranks.agreed = asked
        else:
            self._loader.switch(asked)
        return None

    def settled(self, reading: Reading) -> None:
        """A setting's reading settled: explored on (rank 0's at the next sync, for all)."""
        if self.ranks is not None:
            self.ranks.measured(reading)
        else:
            self.explore(reading)

    def decision(self) -> Decision:
        """Rank 0, at a sync: its explorer's switch, for every rank, and the budget (0: off;
        else the syncs go on, the kept setting's rate watched for a drift)."""
        return Decision(self._loader.asked(), self.share)

    def explore(self, reading: Reading) -> None:
        """Tells the explorer a settled reading; switches to the setting it proposes next."""
        if not self.share:  # off
            return
        if self.start.holds(reading, self._loader.pass_length):  # an earlier run's, as it was
            return
        if self.explorer is None and not self._explore_from(reading):
            return
        if reading.settings == self.explorer.current:  # type: ignore[union-attr]
            self._follow(lambda explorer: explorer.measured(reading, self._loader.pass_length))

    def _explore_from(self, first: Reading) -> bool:
        """The explorer, from the ``first`` reading; False where the storage failed (the run
        goes on unexplored)."""
        loader = self._loader
        workers = stream_workers(loader)  # type: ignore[arg-type]
        if workers is not None:  # each worker would read all of it
            log.info("autotune.DataLoader: %s", unsplit_note(loader.dataset, workers))
        try:
            self.explorer = Explorer.on_run(
                self.start.facts, first,
                batch_size=loader.batch_size or 1, ranks=self.ranks.local if self.ranks else 1,
                window=self._window, workers=workers, share=self.share,
                slow_starts=starts_slowly(loader),
                persist_refused=self._dataset_renewed,  # the loop changes its Dataset
                run_share=self._run_share, batches_per_epoch=loader.epoch_length,
                whole_epochs=not loader.switches_mid_epoch,
                study=self.start.job.study if self.start.job else None,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the storage failed: the run goes on
            record.not_recorded("the study's storage", exc)
            self.share = 0.0
            return False
        self._explores(self.explorer)
        return True

    def _explores(self, explorer: Explorer) -> None:
        """This run explores with ``explorer``: its own, or one a loader made before it left."""
        loader, self.explorer = self._loader, explorer
        # a pass the loop leaves early is its epoch; where it drops the loader, the next goes on
        explorer.joined(loader.passes, made_anew=self.start.made_anew)
        made_anew.explores(self.start.job, loader, explorer)

    def _follow(self, propose: Callable[[Explorer], PipelineConfig]) -> None:
        """Switches to what the explorer ``propose``s (each of its decisions), the setting kept
        noted; where the study's storage fails, to the best so far, exploring no more."""
        explorer: Explorer = self.explorer  # type: ignore[assignment]
        try:
            self._loader.switch(propose(explorer))
        except Exception as exc:  # noqa: BLE001 - the storage failed: the run goes on
            record.not_recorded("the study's storage", exc)
            explorer.done, self.share = True, 0.0
            best = explorer.best
            self._loader.switch(best.settings if best is not None else self._loader.settings)
        else:  # noted where the explorer keeps a setting
            self._note_kept(self._loader)  # type: ignore[arg-type]

    def failed(self, settings: PipelineConfig, failure: Failure | None) -> None:
        """``settings`` failed here (their workers, and the loader fell back; or no epoch
        could time them): the next proposed (with several ranks, at the next sync)."""
        if self.ranks is not None:
            self.ranks.failed(settings, failure)
        else:
            self.fail(settings, failure)

    def fail(self, settings: PipelineConfig, failure: Failure | None) -> None:
        """``settings`` failed: the explorer's, it proposes the next; an earlier run's kept one
        (the loader fell back to yours) is kept no more, and the run explores from yours."""
        explorer = self.explorer
        if explorer is not None and settings == explorer.current:  # kept too: the next best
            self._follow(lambda explorer: explorer.failed(failure))
        elif explorer is None and self.share and failure and failure.kind is UNTIMEABLE:
            # said once for the job: each loader made anew would say it again
            about = self.start.job.job.name if self.start.job else ""
            made_anew.say_once(f"{settings.short()} {failure.message}; not tuned", about)
            self.share = 0.0  # nothing else can be read against it
        elif explorer is None and failure == record.RENEWED:  # several ranks': the twin, for all
            self._loader.switch(dataclasses.replace(settings, persistent_workers=False))
        elif failure and failure.kind in WORKERS_FAILED and self.start.kept_failed(settings):
            self._loader.switch(self._loader.own)  # every rank's, where one fell back alone

    def _note_kept(self, loader: Loader) -> None:
        """The setting kept, where one is, noted for the next run here and as the study's
        best.yaml, where it is news (at once: a loop may leave before its epoch ends)."""
        job, explorer = self.start.job, self.explorer
        if explorer is None or not explorer.settled or job is None:
            return
        if job.note_kept(explorer.current, explorer.best):  # and best.yaml beside its study
            best_yaml.kept_on_run(
                loader, explorer, job, started_from=self.start.origin,
                ranks=self.ranks.local if self.ranks else 1,
                facts=self.start.facts,
            )  # fmt: skip

    def dataset_changed(self, names: list[str]) -> None:
        """The loop changed its Dataset between epochs (``names``; ``dataset_state``): no
        workers kept alive from here (where nothing explores, the setting's twin instead)."""
        if not self._dataset_renewed:
            self._dataset_renewed = True
            log.info("autotune.DataLoader: %s", renewed_note(names))
        if self.explorer is not None:
            self.explorer.refuse_persistent()
        settings = self._loader.settings
        if settings.workers_persist and self.explorer is None and self.ranks is None:
            self._loader.switch(dataclasses.replace(settings, persistent_workers=False))
        elif settings.workers_persist:
            self.failed(settings, record.RENEWED)

    def epoch_ended(self, delivered: int, meter: Meter) -> None:
        """Between epochs (``delivered`` batches): the setting ``meter`` times failed where
        no whole epoch could time it; else, where the budget has grown, the next proposed."""
        if meter.untimeable:
            why = record.untimeable(delivered, between_pauses=meter.steps.apart)
            self.failed(meter.settings, why)
        elif self.explorer is not None and self.share and not self.explorer.done:
            self._follow(lambda explorer: explorer.epoch_ended(delivered))
