"""How ``autotune.DataLoader`` chooses its settings while the run trains: the study's search
space, narrowed to what a run may switch, searched by the study's sampler (Optuna's TPE, ask
and tell), one setting at a time on the run's own batches, then the fastest kept.

The rule: the run's own settings are measured first; then, while the budget left (``tune``
epochs' time, at the rate first measured) still holds a setting's shortest timing (a
trial's sub-windows at their shortest), the sampler proposes the next setting. A proposal
already measured is told its rate at once and not run again; once three in a row are, or
every point of the space is measured, nothing is left to try. Then the fastest setting is
kept for the rest of the run: the run's own unless another measured faster by more than half
the two readings' spreads. A setting whose workers failed is recorded as failed and never
kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from typing import NamedTuple

import optuna
import yaml

from autotune.machine import MachineFacts
from autotune.online import record
from autotune.online.meter import Reading
from autotune.pipeline.config import SWITCHABLE, PipelineConfig
from autotune.runtime.failures import Failure
from autotune.schema import KnobConfig, SearchSpaceConfig
from autotune.session.space import SearchSpace
from autotune.tuner import store

REPEATS_TO_STOP = 3  # proposals in a row already measured: the sampler has nothing new


def online_space(facts: MachineFacts, *, batch_size: int, cuda: bool) -> SearchSpace:
    """The default search space's knobs that a run may switch (``SWITCHABLE``), sized to
    this machine; the user's Dataset and batches are as they are."""
    text = resources.files("autotune.conf").joinpath("search_space", "default.yaml").read_text()
    knobs = {
        name: KnobConfig(**conf)
        for name, conf in yaml.safe_load(text)["knobs"].items()
        if name in SWITCHABLE
    }
    device = "cuda" if cuda else "cpu"
    space_conf = SearchSpaceConfig(name="online", knobs=knobs)
    return SearchSpace.from_config(
        space_conf, facts, device=device, batch_size=batch_size, own_dataset=True
    )


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
        min_setting_s: float = 0.0,
        study: optuna.Study | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``study``: where each setting is recorded (``record.open_record``); else kept in
        memory."""
        self.space = space
        self._share, self._batches_per_epoch, self._clock = share, batches_per_epoch, clock
        self._min_setting_s = min_setting_s  # a setting that cannot get this long is not tried
        self._start = start
        self._recorded = study is not None
        if study is None:
            with record.quiet():
                study = optuna.create_study(direction="maximize", sampler=sampler())
        self.study = study
        self._points = len(space.grid())
        self._started: float | None = None
        self._budget_s: float | None = None
        self._told: dict[PipelineConfig, _Told] = {}  # by the sampler's points
        self._readings: dict[PipelineConfig, Reading] = {}
        self._trial: optuna.Trial | None = None
        self._current = start
        self.done = False
        start_params = space.params_of(start)
        if start_params is not None:  # measured first, as a trial of the space
            store.enqueue(self.study, start_params, {})
            self._ask()

    @property
    def current(self) -> PipelineConfig:
        """The setting being measured now (or kept, once done)."""
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
        """Takes the reading of the current setting; returns the setting to run next."""
        if self._started is None:  # the budget: a share of the first epoch at this rate
            self._started = self._clock() - reading.seconds
            batch_rate = reading.batches / reading.seconds if reading.seconds else 0.0
            epoch_s = self._batches_per_epoch / batch_rate if self._batches_per_epoch else 0.0
            self._budget_s = self._share * epoch_s if batch_rate else 0.0
        self._readings[reading.settings] = reading
        if self._trial is not None:  # else the run's own settings, outside the space
            if self._recorded:
                record.record_trial(self._trial, reading)
            self._tell(reading.samples_per_s)
        return self._next()

    def failed(self, failure: Failure | None = None) -> PipelineConfig:
        """The current setting failed (its workers, or no epoch could time it: ``failure``
        says why); returns the setting to run next."""
        if self._trial is not None:
            if failure is not None and self._recorded:
                record.record_failed(self._trial, failure)
            self._tell(None)
        return self._next()

    def close(self) -> None:
        """The run stopped while a setting was measured: its trial is recorded as
        interrupted rather than left running."""
        trial, self._trial = self._trial, None
        if trial is not None and self._recorded:
            record.record_stopped(self.study, trial)

    def _tell(self, samples_per_s: float | None) -> None:
        """The current trial's rate (None: its workers failed) to the sampler."""
        assert self._trial is not None
        trial, self._trial = self._trial, None
        with record.quiet():
            if samples_per_s is None:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(trial, samples_per_s)
        self._told[self._current] = _Told(samples_per_s or 0.0, trial.number)

    def _next(self) -> PipelineConfig:
        started = self._clock() if self._started is None else self._started
        left = (self._budget_s or 0.0) - (self._clock() - started)
        if left < self._min_setting_s or left <= 0 or not self._ask():
            self.done = True
            best = self.best
            self._current = best.settings if best is not None else self._current
            if best is not None and self._recorded:
                record.record_kept(self.study, best)
        return self._current

    def _ask(self) -> bool:
        """Asks the sampler for a setting not measured yet; False where none is left."""
        for _ in range(REPEATS_TO_STOP):
            if len(self._told) >= self._points:
                return False
            trial = self.study.ask()
            config = self.space.suggest(trial)
            told = self._told.get(config)
            if told is not None:  # told what it measured, costing nothing
                if self._recorded:
                    record.record_repeat(trial, config, told.trial_number)
                with record.quiet():
                    self.study.tell(trial, told.samples_per_s)
                continue
            if self._recorded:
                record.record_asked(trial)
            self._trial, self._current = trial, config
            return True
        return False
