"""How ``autotune.DataLoader`` chooses its settings while the run trains: the study's search
space, narrowed to what a run may switch, searched by the study's sampler (Optuna's TPE, ask
and tell), one setting at a time on the run's own batches, then the fastest kept.

The run's own settings are measured first, then the guides' (``priors``); then the sampler
proposes while the budget left (``budget``) holds a setting's shortest timing, each stopped
once clearly below the best so far (``meter``: the study's pruning rule). While it is
short, the best so far runs and is kept (recorded), until the run has earned another timing.
A proposal already measured is told its rate, not run again: three in a row, or every point
measured, end it; one no epoch can time is failed at once. The run's own settings are kept
unless another measured faster by more than half the two readings' spreads. A setting whose
workers failed is recorded as failed and never kept (a kept one: the next fastest in its
place). Once settled, where the kept setting's rate moves (``drift``), the runners-up and
then the kept setting are measured again, then the sampler, with a fresh start's budget.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import optuna

from autotune.machine import MachineFacts
from autotune.online import record
from autotune.online.budget import Budget, charged, min_setting_s
from autotune.online.drift import DriftWatch
from autotune.online.loader_cpu import reads_wait
from autotune.online.meter import fewest_batches
from autotune.online.reading import Reading
from autotune.online.space import online_space, priors, trains_on_cuda
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure
from autotune.schema import WindowConfig
from autotune.session.space import SearchSpace
from autotune.tuner import store

log = logging.getLogger("autotune.online.loader")

REPEATS_TO_STOP = 3  # proposals in a row already measured: the sampler has nothing new
RECHECKED = 3  # after a drift, the settings measured fastest before, measured again


class _Told(NamedTuple):
    """What the sampler was told of one setting, and the trial that measured it."""

    samples_per_s: float  # 0.0 where its workers failed: never proposed again, never kept
    trial_number: int


def sampler(seed: int = 0) -> optuna.samplers.BaseSampler:
    """The study's sampler, seeded: TPE after a few random points."""
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``batches_per_epoch``: None until known (a stream's, at its first epoch's end:
        ``epoch_ended``); ``whole_epochs``: a switch waits for the next epoch, so a proposal
        runs one; ``fewest_batches``: the fewest batches of an epoch that can time a setting
        (a proposal longer than an epoch is failed at once); ``study``: where each setting is
        recorded (``record.open_record``); else kept in memory."""
        self.space, self._clock = space, clock
        self.budget = Budget(
            share, run_share, whole_epochs, min_setting_s, batches_per_epoch, clock=clock
        )
        self._fewest_batches, self._start = fewest_batches, start
        self._recorded = study is not None
        if study is None:
            with record.quiet():
                study = optuna.create_study(direction="maximize", sampler=sampler())
        self.study = study
        self._points = len(space.grid())
        self._asked_at = 0.0
        self.paused = False  # the budget is short: the best so far runs until it has grown
        self._told: dict[PipelineConfig, _Told] = {}  # by the sampler's points
        self._readings: dict[PipelineConfig, Reading] = {}  # charged their restarts
        self._restarts: dict[PipelineConfig, float] = {}  # workers started again each epoch
        self._trial: optuna.Trial | None = None
        self._current = start
        self.done = False
        self.rechecks = 0  # times the kept setting's rate moved and the choice was remade
        self._drift: DriftWatch | None = None  # once settled: the kept setting's rate watched
        self._priors_due = False
        start_params = space.params_of(start)
        if start_params is not None:  # measured first, as a trial of the space
            store.enqueue(self.study, start_params, {})
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
        **budget: Any,
    ) -> Explorer:
        """An explorer of the settings a run on this machine may switch (``online_space``, a
        rank's share of it; workers beyond the CPUs where the ``first`` reading says reads
        wait), from the setting it read, each timed by ``window``'s rules; ``budget``: the
        explorer's own arguments (``share``, ...)."""
        waits, cuda = reads_wait(first, facts, ranks), trains_on_cuda()
        space = online_space(facts, batch_size=batch_size, cuda=cuda, ranks=ranks, read_wait=waits)
        if waits is not None:
            log.info("autotune.DataLoader: %s", waits.note(max(1, facts.usable_cpus // ranks)))
        return cls(
            space, first.settings, min_setting_s=min_setting_s(window),
            fewest_batches=lambda settings: fewest_batches(settings, window), **budget,
        )  # fmt: skip

    @property
    def current(self) -> PipelineConfig:  # being measured now, or kept
        return self._current

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

    def measured(self, reading: Reading) -> PipelineConfig:
        """Takes the current setting's reading (``charged``); returns the setting to run next."""
        if self.budget.started is None:
            self.budget.first_reading(reading)
        reading = charged(reading, self._restarts, self.budget.batches_per_epoch)
        if self.settled:  # the kept setting read again: has its rate moved?
            if self._drift is not None and self._drift.drifted(reading):
                self._recheck(reading)
            elif self.done:
                return self._current
            return self._next()  # paused: is a proposal due yet?
        self._readings[reading.settings] = reading
        self.budget.unit_at(self.best or reading)
        if self._trial is not None:  # else the run's own settings, outside the space
            if self._recorded:
                record.record_trial(self._trial, reading)
            self._tell(reading.samples_per_s, reading.between_epochs_s)
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
        if self._trial is None and self.settled:
            told = self._told.get(self._current)
            self._told[self._current] = _Told(0.0, told.trial_number if told else -1)
            self._readings.pop(self._current, None)
            return self._keep_best(self._start)
        if self._trial is not None:
            if failure is not None and self._recorded:
                record.record_failed(self._trial, failure)
            self._tell(None)
        return self._next()

    def close(self) -> None:
        """The run stopped while a setting was asked or measured: its trial interrupted."""
        trial, self._trial = self._trial, None
        if trial is not None and self._recorded:
            record.record_stopped(self.study, trial)

    def _tell(self, samples_per_s: float | None, between_epochs_s: float = 0.0) -> None:
        """The trial's rate (None: its workers failed) to the sampler, its time to the budget."""
        assert self._trial is not None
        trial, self._trial = self._trial, None
        with record.quiet():
            if samples_per_s is None:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(trial, samples_per_s)
        self._told[self._current] = _Told(samples_per_s or 0.0, trial.number)
        if self._current != self._start:  # the run's own settings cost nothing to explore
            self.budget.charge(self._asked_at, between_epochs_s)

    @property
    def settled(self) -> bool:
        """Whether a setting is kept, for good (``done``) or until the budget has grown."""
        return self.done or self.paused

    def _next(self) -> PipelineConfig:
        short = self.budget.short
        if short and self.paused:
            return self._current
        if not short and self._ask():
            self.paused = False
            return self._current
        # the budget spent (for now, where it grows), or nothing left to try
        self.done = not (short and self.budget.grows)
        self.paused = not self.done
        return self._keep_best(self._current)

    def _keep_best(self, otherwise: PipelineConfig) -> PipelineConfig:
        """The fastest setting measured (``otherwise`` where none is) is kept, recorded, and
        its rate watched."""
        best = self.best
        self._current = best.settings if best is not None else otherwise
        self._drift = DriftWatch(best) if best is not None else None
        if best is not None and self._recorded:
            record.record_kept(self.study, best)
        return self._current

    def _recheck(self, reading: Reading) -> None:
        """The kept setting's rate moved (``drift``): what was measured before no longer
        holds. The runners-up are measured again, then the kept setting (its new reading
        stands until then: a change that passes meanwhile, a neighbour's job ending, is not
        held against it), ahead of the sampler's proposals, with a fresh start's budget."""
        earlier = sorted(self._readings.values(), key=lambda r: r.samples_per_s, reverse=True)
        self._readings = {reading.settings: reading}
        for other in [*earlier[:RECHECKED], reading]:
            params = self.space.params_of(other.settings)
            if params is not None and (other is reading or other.settings != reading.settings):
                self._told.pop(other.settings, None)  # measured anew
                store.enqueue(self.study, params, {})
        self.done = self.paused = False
        self._drift, self.rechecks = None, self.rechecks + 1
        self.budget.afresh(reading)

    def _ask(self) -> bool:
        """Asks the sampler for a setting not measured yet; False where none is left."""
        if self._priors_due:
            self._priors_due = False
            for prior in priors(self.space, self._start, fits=lambda c: not self._too_long(c)):
                store.enqueue(self.study, prior, {})
        repeats = 0
        while repeats < REPEATS_TO_STOP and len(self._told) < self._points:
            trial = self._trial = self.study.ask()  # from here, a stop records it (``close``)
            if self._recorded:
                record.record_asked(trial)
            with warnings.catch_warnings():  # a queued point out of range: failed below
                warnings.filterwarnings("ignore", message="Fixed parameter")
                config = self.space.suggest(trial)
            if self.space.params_of(config) is None:  # queued by a run of another space
                self._fail(trial, config, record.OUTSIDE)
                continue
            if (told := self._told.get(config)) is not None:  # told its rate, costing nothing
                if self._recorded:
                    record.record_repeat(trial, config, told.trial_number)
                with record.quiet():
                    self.study.tell(trial, told.samples_per_s)
                self._trial, repeats = None, repeats + 1
                continue
            if self._longer_than_an_epoch(trial, config):
                continue
            self._current, self._asked_at = config, self._clock()
            return True
        return False

    def _too_long(self, config: PipelineConfig) -> bool:  # for an epoch to time it
        return self._fewest_batches(config) > (self.budget.batches_per_epoch or float("inf"))

    def _longer_than_an_epoch(self, trial: optuna.Trial, config: PipelineConfig) -> bool:
        """Whether no epoch can time ``config``: then failed with why, costing nothing."""
        too_long = self._too_long(config)
        if too_long:
            self._fail(trial, config, record.untimeable(self.budget.batches_per_epoch or 0))
        return too_long

    def _fail(self, trial: optuna.Trial, config: PipelineConfig, failure: Failure) -> None:
        """``trial`` failed before it ran (``failure`` says why), costing nothing."""
        if self._recorded:
            record.record_failed(trial, failure)
        with record.quiet():
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self._trial, self._told[config] = None, _Told(0.0, trial.number)
