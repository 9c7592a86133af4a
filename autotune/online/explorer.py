"""How ``autotune.DataLoader`` chooses its settings while the run trains: the study's search
space, narrowed to what a run may switch, searched by the study's sampler (Optuna's TPE, ask
and tell), one setting at a time on the run's own batches, then the fastest kept.

The run's own settings are measured first, then the guides' (``priors``); then the sampler
proposes while the budget left (``budget``) holds a setting's shortest timing, each stopped
once clearly below the best so far (``meter``: the study's pruning rule). While it is
short, the best so far runs and is kept (recorded), until the run has earned another timing.
A proposal already measured is told its rate, not run again (three in a row, or every point
measured, end it); one no epoch can time fails at once, and one whose workers' start the
budget left cannot pay waits until it can (``admission``; ``proposals``: ask and tell). The
run's own settings are kept unless another measured faster by more than half the two
readings' spreads; where the fastest other read faster within that noise, both are measured
once more, and each one's two readings pooled, before one is kept. A setting whose workers
failed is recorded as failed and never kept (a kept one: the next fastest in its place). Once
settled, where the kept setting's rate moves (``drift``), the runners-up and then the kept
setting are measured again, then the sampler, with a fresh start's budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import optuna

from autotune.machine import MachineFacts
from autotune.online import record
from autotune.online.admission import Admission, WorkerStarts
from autotune.online.budget import Budget, Passes, charged, min_setting_s
from autotune.online.drift import DriftWatch
from autotune.online.loader_cpu import reads_wait
from autotune.online.proposals import Proposals
from autotune.online.reading import Reading, pooled
from autotune.online.space import online_space, priors, trains_on_cuda
from autotune.online.sub_window import fewest_batches
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure
from autotune.schema import WindowConfig
from autotune.session.space import SearchSpace

log = logging.getLogger("autotune.online.loader")

RECHECKED = 3  # after a drift, the settings measured fastest before, measured again


class Explorer:
    """Proposes the settings to measure next, from what was measured so far."""

    def __init__(
        self,
        space: SearchSpace,
        start: PipelineConfig,
        *,
        share: float,
        batches_per_epoch: int | None,
        whole_epochs: bool = False,
        min_setting_s: float = 0.0,
        fewest_batches: Callable[[PipelineConfig], int] = lambda settings: 0,
        run_share: float = 0.0,
        study: optuna.Study | None = None,
        persist_refused: bool = False,
        starts: WorkerStarts | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``batches_per_epoch``: None until known (a stream's, at its first epoch's end);
        ``whole_epochs``: a switch waits for the next epoch, so a proposal runs one;
        ``fewest_batches``: the fewest batches of an epoch that can time a setting (one longer
        fails at once); ``study``: where each setting is recorded (``record.open_record``),
        else memory; ``persist_refused``: the loop changes its Dataset (``refuse_persistent``);
        ``starts``: its workers' starts, predicted (None: each as quick as a fork)."""
        self.space, self._clock, self._start = space, clock, start
        budget = share, run_share, whole_epochs, min_setting_s, batches_per_epoch
        self.budget = Budget(*budget, clock=clock)
        starts, refused = starts or WorkerStarts(1, slow=False), persist_refused
        self.admission = Admission(self.budget, fewest_batches, starts, persist_refused=refused)
        self.proposals, self._asked_at = Proposals(space, study), 0.0
        self.paused = False  # the budget is short: the best so far runs until it has grown
        self._readings: dict[PipelineConfig, Reading] = {}  # charged their restarts
        self._looks_due: list[PipelineConfig] = []  # measured once more, in this order
        self._looked_again: set[PipelineConfig] = set()  # the contenders given a second look
        self.start_reading: Reading | None = None  # ``start``'s, charged as they are
        self._restarts: dict[PipelineConfig, float] = {}  # workers started again each epoch
        self._current, self.done = start, False
        self.rechecks = 0  # times the kept setting's rate moved and the choice was remade
        self._drift: DriftWatch | None = None  # once settled: the kept setting's rate watched
        self._priors_due = False
        if (start_params := space.params_of(start)) is not None:  # measured first, a trial
            self.proposals.queue(start_params)
            self._ask()
        self._priors_due = True  # asked next: enqueued then, when a stream's epoch is known

    @classmethod
    def on_run(
        cls,
        facts: MachineFacts,
        first: Reading,
        *,
        batch_size: int,
        ranks: int,
        window: WindowConfig,
        workers: tuple[int, ...] | None = None,
        slow_starts: bool = False,
        **budget: Any,
    ) -> Explorer:
        """An explorer of what a run here may switch (``online_space``, a rank's share; workers
        past the CPUs where ``first`` reads wait; only ``workers``' counts, where given), from
        the setting it read, timed by ``window``'s rules; ``slow_starts``: each worker starts
        an interpreter (``admission``); ``budget``: its own (``share``, ...)."""
        waits, cuda = reads_wait(first, facts, ranks), trains_on_cuda()
        space = online_space(
            facts, batch_size=batch_size, cuda=cuda, ranks=ranks, read_wait=waits, workers=workers
        )
        if waits is not None:
            log.info("autotune.DataLoader: %s", waits.note(max(1, facts.usable_cpus // ranks)))
        return cls(
            space, first.settings, min_setting_s=min_setting_s(window),
            fewest_batches=lambda settings: fewest_batches(settings, window),
            starts=WorkerStarts(facts.usable_cpus // ranks, slow=slow_starts), **budget,
        )  # fmt: skip

    @property
    def current(self) -> PipelineConfig:  # being measured now, or kept
        return self._current

    @property
    def study(self) -> optuna.Study:  # where each setting measured is a trial
        return self.proposals.study

    @property
    def best(self) -> Reading | None:
        """The fastest setting measured so far; the run's own unless another measured faster
        by more than half the two readings' spreads (a margin of their noise)."""
        readings = self._readings.values()
        if not readings:
            return None
        top = max(readings, key=lambda r: r.samples_per_s)
        own = self._readings.get(self._start)
        if own is not None and top is not own:
            margin = (own.spread + top.spread) / 2
            if top.samples_per_s <= own.samples_per_s * (1 + margin):
                return own
        return top

    def measured(self, reading: Reading, batches_a_pass: int | None = None) -> PipelineConfig:
        """Takes the current setting's reading (``charged``, each pass's start over
        ``batches_a_pass``: an epoch's unless the loop leaves its epochs early); returns the
        setting to run next."""
        if self.budget.started is None:
            self.budget.first_reading(reading)
        self.admission.starts.seen(reading)
        pass_length = batches_a_pass or self.budget.batches_per_epoch
        reading = charged(reading, self._restarts, pass_length, self.budget.made_anew)
        if reading.settings == self._start and self.start_reading is None:
            self.start_reading = reading
        if self.settled:  # the kept setting read again: has its rate moved?
            if self._drift is not None and self._drift.drifted(reading):
                self._recheck(reading)
            elif self.done:
                return self._current
            return self._next()  # paused: is a proposal due yet?
        earlier = self._readings.get(settings := reading.settings)
        if settings in self._looks_due[:1] and earlier is not None:
            self._looks_due.pop(0)
            look, reading = reading, pooled(earlier, reading)  # both readings count
            self.proposals.looked_again(look, reading.samples_per_s)
            if settings == self._start:  # best.yaml's baseline: its pooled rate
                self.start_reading = reading
        self._readings[settings] = reading
        self.budget.unit_at(self.best or reading)
        if self.proposals.asked:  # else the run's own settings, outside the space
            self.proposals.tell(self._current, reading)
            self._charge(reading.between_epochs_s)
        return self._next()

    def epoch_ended(self, batches: int) -> PipelineConfig:
        """An epoch of ``batches`` ended (the first tells a stream's length); returns the next
        epoch's setting: a proposal where the budget has grown while the best so far ran."""
        self.budget.epoch_ended(batches)
        return self._next() if self.paused else self._current

    def failed(self, failure: Failure | None = None) -> PipelineConfig:
        """The current setting failed (its workers, or no epoch could time it: ``failure``
        says why); returns the setting to run next: where it was the one kept, the next
        fastest measured, kept in its place (never the failed one again)."""
        looking = self._current in self._looks_due[:1]  # a second look's: no more looks
        if looking or (not self.proposals.asked and self.settled):
            self.proposals.never_again(self._current)
            self._readings.pop(self._current, None)
            self._looks_due = []
            return self._next() if looking else self._keep_best(self._start)
        if self.proposals.asked:
            self.proposals.tell(self._current, None, failure)
            self._charge()
        return self._next()

    def refuse_persistent(self) -> None:
        """Workers that persist would not see the Dataset the loop changes between epochs:
        none measured is kept, none proposed is measured (failed as it is asked, for nothing)."""
        self.admission.persist_refused = True
        for settings in [s for s in self._readings if s.workers_persist]:
            self._readings.pop(settings)
            self.proposals.never_again(settings)

    def joined(self, passes: Passes, *, made_anew: bool = False) -> None:
        """A loader explores with this from here: its passes (one made anew: each epoch); the
        proposal one made anew takes up and cannot time (its loop reads fewer batches) fails."""
        self.budget.passes, self.budget.made_anew = passes, made_anew
        self._asked_at = self._clock()
        if made_anew and self.proposals.asked and (why := self.admission.refused(self._current)):
            self.failed(why)

    def close(self, why: Failure = record.STOPPED) -> None:
        """The run stopped (or its loader was collected) while a setting was measured."""
        self.proposals.close(why)

    def _charge(self, between_epochs_s: float = 0.0) -> None:
        """The setting just told, its time to the budget (the run's own costs nothing)."""
        if self._current != self._start:
            start_s = self.admission.starts.predicted_s(self._current) or 0.0
            self.budget.charge(self._asked_at, between_epochs_s, start_s)

    @property
    def settled(self) -> bool:
        """Whether a setting is kept, for good (``done``) or until the budget has grown."""
        return self.done or self.paused

    def _next(self) -> PipelineConfig:
        if self._looks_due:  # a second look
            self._current, self.done, self.paused = self._looks_due[0], False, False
            return self._current
        if self.paused and self.admission.short:  # until it pays a timing, or what waits
            return self._current
        short = self.budget.short
        if not short and self._ask():
            self.paused = False
            return self._current
        if self._second_look():
            return self._next()
        # the budget spent (for now, where it grows), or a setting waiting for it to pay its
        # workers' start, or nothing left to try
        waiting = self.admission.waiting_s is not None
        self.done = not ((short or waiting) and self.budget.grows)
        self.paused = not self.done
        return self._keep_best(self._current)

    def _keep_best(self, otherwise: PipelineConfig) -> PipelineConfig:
        """The fastest setting measured (``otherwise`` where none is) kept, recorded, watched."""
        best = self.best
        self._current = best.settings if best is not None else otherwise
        self._drift = DriftWatch(best) if best is not None else None
        if best is not None:
            self.proposals.kept(best)
        return self._current

    def _second_look(self) -> bool:
        """Whether the start would be kept only as the fastest other read faster within their
        noise: then both are measured once more (once a contender), each one's readings pooled,
        so that a neighbour's burst decides nothing. Free: the start costs nothing, and the
        other read faster than the setting it would run in place of."""
        own, best = self._readings.get(self._start), self.best
        if own is None or best is not own:
            return False
        top = max(self._readings.values(), key=lambda r: r.samples_per_s)
        if top is own or top.settings in self._looked_again:
            return False
        self._looked_again.add(top.settings)
        self._looks_due = [top.settings, own.settings]
        return True

    def _recheck(self, reading: Reading) -> None:
        """The kept setting's rate moved (``drift``): what was measured before no longer
        holds. The runners-up are measured again, then the kept setting (its new reading
        stands until then: a change that passes meanwhile, a neighbour's job ending, is not
        held against it), ahead of the sampler's proposals, with a fresh start's budget."""
        earlier = sorted(self._readings.values(), key=lambda r: r.samples_per_s, reverse=True)
        self._readings = {reading.settings: reading}
        self._looks_due, self._looked_again = [], set()
        for other in [*earlier[:RECHECKED], reading]:
            params = self.space.params_of(other.settings)
            if params is not None and (other is reading or other.settings != reading.settings):
                self.proposals.queue(params, anew=other.settings)
        self.done = self.paused = False
        self._drift, self.rechecks = None, self.rechecks + 1
        self.budget.afresh(reading)

    def _ask(self) -> bool:
        """Asks the sampler for a setting not measured yet; False where none is left."""
        if self._priors_due:
            self._priors_due = False
            for prior in priors(self.space, self._start, fits=self.admission.timeable):
                self.proposals.queue(prior)
        config = self.admission.ask(self.proposals)
        if config is None:
            return False
        self._current, self._asked_at = config, self._clock()
        return True
