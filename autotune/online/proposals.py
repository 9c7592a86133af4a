"""The study's side of exploring on a run: each setting measured is a trial of the run's study,
asked of its sampler (Optuna's TPE, ask and tell) and told the samples/s it read, with the
tuner's trial attributes (``record``). The points the run queues (its own settings, the
guides', a second look, the runners-up after a drift) come first, kept in the run and added
to the study as trials once read: two runs of one job share its study, and Optuna's queue
would hand one's points to the other.

A point the sampler proposes again is told its rate without running (a repeat, costing
nothing): ``REPEATS_TO_STOP`` of them in a row, or every point measured, and the sampler has
nothing new. A point queued outside the run's space (by an earlier build's run), or one no
epoch can time, is failed with why before it runs; for the sampler's, the point with the
most workers below it that an epoch can time, and not measured yet, is measured in its
place (the sampler, told nothing of a failed point, asks for its like again: the one most
workers below, once measured, would end the asking as repeats). A point whose workers' start
the budget left cannot pay (``admission``) waits in the queue, measured first once it is
paid for; the sampler's has its trial failed with why, and fewer workers whose start is paid
for measured in its place meanwhile. A setting asked or
being measured when the run stops is recorded as interrupted. What to measure when, and
what to keep, is the explorer's (``explorer``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import optuna

from autotune.online import record
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure, FailureKind
from autotune.session.space import SearchSpace
from autotune.tuner import storage as study_storage

REPEATS_TO_STOP = 3  # proposals in a row already measured: the sampler has nothing new
# a sampler's point failed for one of these has fewer workers measured in its place that fit
FEWER_MAY_FIT = (FailureKind.UNTIMEABLE, FailureKind.OVER_BUDGET)


class _Told(NamedTuple):
    """What the sampler was told of one setting, and the trial that measured it."""

    samples_per_s: float  # 0.0 where its workers failed: never proposed again, never kept
    trial_number: int
    params: dict[str, Any] | None = None  # its point (a second look is recorded at it)


def sampler(seed: int = 0) -> optuna.samplers.BaseSampler:
    """The study's sampler, seeded: TPE after a few random points."""
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)


class Proposals:
    """The run's trials: asked of the sampler, told what each setting read."""

    def __init__(self, space: SearchSpace, study: optuna.Study | None) -> None:
        """``study``: where each setting is recorded (``record.open_record``); else a study
        kept in memory."""
        self.space = space
        self._recorded = study is not None
        if study is None:
            with record.quiet():
                study = optuna.create_study(direction="maximize", sampler=sampler())
        self.study = study
        self._points = len(space.grid())
        self._told: dict[PipelineConfig, _Told] = {}  # by the sampler's points
        self._trial: optuna.Trial | None = None  # asked, not told yet
        # the run's own points, measured before the sampler's, each a trial once read: kept
        # here, not in the study's queue, where a run of the same job beside this one (a
        # sweep's seeds) would be handed them by Optuna, and its start measured as another
        self._queued: list[dict[str, Any]] = []
        self._point: dict[str, Any] | None = None  # one of them, being measured

    @property
    def asked(self) -> bool:
        """Whether a setting is asked and not told yet (the run's own settings, outside the
        space, are measured with none)."""
        return self._trial is not None or self._point is not None

    def queue(self, params: dict[str, Any], *, anew: PipelineConfig | None = None) -> None:
        """``params`` asked next, ahead of the sampler's own; ``anew``: their settings,
        measured before, to be measured again (not told their earlier rate)."""
        if anew is not None:
            self._told.pop(anew, None)
        self._queued.append(params)

    def ask(
        self,
        refused: Callable[[PipelineConfig], Failure | None],
        unpaid: Callable[[PipelineConfig], Failure | None] = lambda config: None,
    ) -> PipelineConfig | None:
        """The next setting not measured yet: a queued one, else the sampler's, its trial
        asked; None where none is left. One ``refused`` says can never run here is failed,
        costing nothing; one ``unpaid`` says cannot run yet stays queued (the sampler's: its
        trial failed with why, and its point queued), measured first once paid for."""
        queued, self._queued = self._queued, []
        for at, params in enumerate(queued):
            config = self.space.config_at(params)
            if config in self._told:  # measured already: nothing to do
                continue
            if (why := refused(config)) is not None:
                self._point = params
                self.tell(config, None, why)
            elif unpaid(config) is not None:  # asked again, first, once it is paid for
                self._queued.append(params)
            else:
                self._point, self._queued = params, self._queued + queued[at + 1 :]
                return config
        repeats = 0
        while repeats < REPEATS_TO_STOP and len(self._told) < self._points:
            trial = self._trial = self.study.ask()  # from here, a stop records it (``close``)
            if self._recorded:
                record.record_asked(trial)
            with warnings.catch_warnings():  # a point queued by an earlier build: failed below
                warnings.filterwarnings("ignore", message="Fixed parameter")
                config = self.space.suggest(trial)
            if (point := self.space.params_of(config)) is None:  # queued by another space's run
                self._fail(trial, config, record.OUTSIDE)
                continue
            if (told := self._told.get(config)) is not None:  # told its rate, costing nothing
                if self._recorded:
                    record.record_repeat(trial, config, told.trial_number)
                with record.quiet():
                    self.study.tell(trial, told.samples_per_s)
                self._trial, repeats = None, repeats + 1
                continue
            if (why := refused(config) or unpaid(config)) is not None:
                self._fail(trial, config, why)
                if why.kind is FailureKind.OVER_BUDGET and point not in self._queued:
                    self._queued.append(point)  # measured first, once paid for
                if why.kind not in FEWER_MAY_FIT:
                    continue
                below = self._fitting_below(config, lambda c: refused(c) or unpaid(c))
                if not below and why.kind is FailureKind.UNTIMEABLE:
                    return None  # no fewer workers fit: nothing here can be timed
                if not below:
                    repeats += 1  # none fewer paid for yet
                    continue
                if (nearest := next((c for c in below if c not in self._told), None)) is None:
                    repeats += 1  # each that fits measured already
                    continue
                self._point, config = self.space.params_of(nearest), nearest
            return config
        return None

    def _fitting_below(
        self, config: PipelineConfig, unfit: Callable[[PipelineConfig], Failure | None]
    ) -> list[PipelineConfig]:
        """``config`` with each count of workers below its own that fits (``unfit`` says
        none: an epoch can time it, whole rounds of workers; the budget pays its start), the
        most first."""
        params = self.space.params_of(config) or {}
        below = [w for w in self.space.choices("num_workers") if w < config.num_workers]
        fewer = [self.space.config_at(params | {"num_workers": w}) for w in sorted(below)[::-1]]
        fitting = [c for c in fewer if self.space.params_of(c) is not None and not unfit(c)]
        return list(dict.fromkeys(fitting))  # no workers: one setting, whatever else is asked

    def tell(
        self, settings: PipelineConfig, reading: Reading | None, failure: Failure | None = None
    ) -> None:
        """The asked setting measured ``settings``: its ``reading``, recorded; or None, its
        workers failed (``failure`` says why, where known)."""
        rate = reading.samples_per_s if reading else 0.0
        if self._point is not None:
            params, self._point = self._point, None
            number = self._add(record.unasked_trial(params, self._of(params), reading, failure))
            self._told[settings] = _Told(rate, number, params)
            return
        assert self._trial is not None
        trial, self._trial = self._trial, None
        if self._recorded and reading is not None:
            record.record_trial(trial, reading)
        elif self._recorded and failure is not None:
            record.record_failed(trial, failure)
        with record.quiet():
            if reading is None:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(trial, reading.samples_per_s)
        self._told[settings] = _Told(rate, trial.number, trial.params)

    def looked_again(self, look: Reading, samples_per_s: float) -> None:
        """``look``: a setting measured once more (a second look), recorded as a trial of
        its own beside its first; ``samples_per_s``: the two readings' pooled rate, what a
        repeat of it is told from here."""
        told = self._told.get(look.settings)
        if told is None or told.params is None:  # the run's own outside the space: no trial
            return
        first, params = told.trial_number, told.params
        self._add(record.unasked_trial(params, self._of(params), look, look_of=first))
        self._told[look.settings] = told._replace(samples_per_s=samples_per_s)

    def _of(self, params: dict[str, Any]) -> dict[str, Any]:  # as ``suggest`` records them
        return self.space.distributions(params)

    def _add(self, trial: optuna.trial.FrozenTrial) -> int:
        with record.quiet():
            return study_storage.add_trial(self.study, trial)

    def never_again(self, settings: PipelineConfig) -> None:
        """``settings`` failed after they were measured (kept, their workers died): never
        proposed again."""
        told = self._told.get(settings)
        self._told[settings] = _Told(0.0, told.trial_number if told else -1)

    def trial_of(self, settings: PipelineConfig) -> int | None:
        """The trial that measured ``settings`` (None: none did, or none is known)."""
        told = self._told.get(settings)
        return told.trial_number if told is not None and told.trial_number >= 0 else None

    def kept(self, best: Reading) -> None:
        """The setting kept, recorded for the next run of the job."""
        if self._recorded:
            record.record_kept(self.study, best)

    def close(self, why: Failure = record.STOPPED) -> None:
        """The run stopped while a setting was asked or measured (``why``: or its loader was
        collected): its trial failed with why."""
        if self._point is not None and self._recorded:  # recorded as stopped, as an asked one
            params, self._point = self._point, None
            try:
                self._add(record.unasked_trial(params, self._of(params), None, why))
            except Exception as exc:  # noqa: BLE001 - at exit: one warning, never a traceback
                record.not_recorded(self.study.study_name, exc)
        trial, self._trial = self._trial, None
        if trial is not None and self._recorded:
            record.record_stopped(self.study, trial, why)

    def _fail(self, trial: optuna.Trial, config: PipelineConfig, failure: Failure) -> None:
        """``trial`` failed before it ran (``failure`` says why), costing nothing."""
        if self._recorded:
            record.record_failed(trial, failure)
        with record.quiet():
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self._trial = None
        if failure.kind is not FailureKind.OVER_BUDGET:  # that one is asked again, paid for
            self._told[config] = _Told(0.0, trial.number)
