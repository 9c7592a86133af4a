"""One trial of the search: suggest a config, pre-check it, measure it in a child process,
record what was seen, and return the rate Optuna maximizes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NoReturn

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.machine import MachineFacts
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.user_data import UserData
from autotune.runtime.trial import run_trial
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner import prospects, rate_model, store, study_trials
from autotune.tuner.metrics import epoch_rate, startup_per_epoch
from autotune.tuner.progress import best_so_far
from autotune.tuner.store import TrialKey
from autotune.tuner.ways import BEATEN_BY, best_epoch_rate, searches_both

log = logging.getLogger(__name__)


def _nothing() -> None:
    pass


class TrialFailed(Exception):
    """A trial that did not produce a measurement; its reason is on the trial."""


def compiled_while_timed(compiles: int) -> str:
    """The trial line's note where torch.compile compiled inside the timed windows."""
    if not compiles:
        return ""
    return (
        f" [{compiles} graph(s) compiled while timed: batches of a shape the warm-up had not "
        "seen; the compile time is in this rate]"
    )


def precheck(
    config: PipelineConfig,
    facts: MachineFacts,
    *,
    sample_bytes: int,
    ranks: int = 1,
    buffer_bytes: int = 0,
) -> str | None:
    """Why this config would exhaust shared or host memory, or None if it fits.

    Workers hand batches over through /dev/shm: ``num_workers × prefetch_factor`` batches are
    in flight, for each of ``ranks`` loaders, and pinning copies each once more into
    page-locked host memory. ``buffer_bytes``: what each reading process of the Dataset holds
    besides (a shuffle buffer), one per worker (or the main process) of each rank.
    """
    in_flight = ranks * config.buffered_batches * config.batch_size * sample_bytes
    mib = 2**20
    if (
        config.num_workers
        and facts.shm_free_bytes is not None
        and in_flight > 0.8 * facts.shm_free_bytes
    ):
        return (
            f"~{in_flight // mib} MiB of batches in flight through /dev/shm, "
            f"{facts.shm_free_bytes // mib} MiB free: raise --shm-size or lower "
            "num_workers x prefetch_factor"
        )
    buffers = ranks * max(1, config.num_workers) * buffer_bytes
    if buffers and in_flight + buffers > 0.5 * facts.memory_available_bytes:
        return (
            f"~{buffers // mib} MiB of the Dataset's buffers ({buffer_bytes // mib} MiB in each "
            f"of {ranks * max(1, config.num_workers)} reading processes) and ~{in_flight // mib} "
            f"MiB of batches, {facts.memory_available_bytes // mib} MiB of RAM available: lower "
            "its shuffle_buffer (dataset.kwargs.shuffle_buffer) or num_workers"
        )
    host = in_flight * (2 if config.pin_memory else 1)
    if host > 0.5 * facts.memory_available_bytes:
        return (
            f"~{host // mib} MiB of buffered batches, {facts.memory_available_bytes // mib} MiB "
            "of RAM available: lower num_workers x prefetch_factor or batch_size"
        )
    return None


def _said(trial: optuna.Trial, predicted: rate_model.Prediction | None) -> str:
    """Stores the rate model's prediction on the trial; its words for the trial's line."""
    if predicted is None:
        return ""
    rate_model.record(trial, predicted)
    return f", model {predicted.samples_per_s:.1f} ({predicted.binds})"


def _pruned(trial: optuna.Trial, head: str, after: int, so_far: list[float]) -> NoReturn:
    """Says why the trial stopped early (``ways.ClearlyBeaten``), and ends it as pruned."""
    rate = f"{so_far[-1]:.1f} samples/s so far" if so_far else "its rate so far"
    way_best = best_epoch_rate(trial.study, trial.params) or 0.0
    log.info(
        "%s pruned after sub-window %d: %s, even %d%% higher below its way's best (%.1f)%s",
        head, after, rate, round(100 * BEATEN_BY), way_best, best_so_far(trial),
    )  # fmt: skip
    raise optuna.TrialPruned()


class Objective:
    """``objective(trial)``: suggest, pre-check, measure in a child process, record.

    Returns samples/s over an epoch (``study.epoch_aware``) or the steady rate.
    """

    def __init__(self, session: Session, *, run: Run = run_trial) -> None:
        self.session, self.run = session, run
        crop = session.conf.recipe.crop_size
        self.sample_bytes = 3 * crop * crop  # uint8 CHW crossing from the workers

    def __call__(self, trial: optuna.Trial, *, measuring: Callable[[], None] = _nothing) -> float:
        """``measuring`` is called once the trial is known not to be a repeat, before it
        is measured."""
        config = self.session.space.suggest(trial)
        if not isinstance(trial, optuna.trial.FixedTrial):
            earlier = study_trials.earlier_run(trial.study, config)
            if earlier is not None:
                return self._repeat(trial, config, earlier)
        measuring()
        head = self._head(trial, config)
        self._skip_if_it_would_not_fit(trial, config, head)
        predicted = self._predict_or_skip(trial, config, head)  # before the run

        so_far: list[float] = []

        def should_prune(index: int, running_median: float) -> bool:
            trial.report(running_median, index)
            so_far.append(running_median)
            return trial.should_prune()

        study = self.session.conf.study
        outcome = self.run(
            self.session.job(config), timeout_s=study.trial_timeout, should_prune=should_prune
        )
        store.record_outcome(trial, config, outcome)
        if study.memory_budget_gb is not None and outcome.peak_memory_bytes:
            over = outcome.peak_memory_bytes / 2**30 - study.memory_budget_gb
            store.set_trial_attr(trial, TrialKey.CONSTRAINT, over)
        if outcome.status == "pruned":
            _pruned(trial, head, (outcome.pruned_at or 0) + 1, so_far)
        if outcome.measurement is None:
            assert outcome.failure is not None
            failure = outcome.failure
            log.info("%s FAILED %s: %s%s", head, failure.kind, failure.message, best_so_far(trial))
            raise TrialFailed(f"{failure.kind}: {failure.message}")
        m = outcome.measurement
        preparation = self.session.preparation_per_epoch(config)
        if preparation:
            store.set_trial_attr(trial, TrialKey.PREPARATION, round(preparation, 3))
        startup = startup_per_epoch(
            config, steady=m.samples_per_s, epoch_start_s=m.epoch_start_s,
            time_to_first_batch_s=m.time_to_first_batch_s, preparation_s=preparation,
            epoch_overhead_s=m.epoch_overhead_s,
        )  # fmt: skip
        value = epoch_rate(m.samples_per_s, startup, epoch_samples=self.session.epoch_samples)
        store.set_trial_attr(trial, TrialKey.EPOCH, round(value, 1))
        model = _said(trial, predicted)
        log.info(
            "%s %7.1f samples/s (steady %.1f, spread %3.0f%%, data wait %3.0f%%%s)%s%s",
            head,
            value,
            m.samples_per_s,
            100 * m.spread,
            100 * m.data_wait_fraction,
            model,
            compiled_while_timed(m.timed_compiles),
            best_so_far(trial, value),
        )
        return value

    def model(self, study: optuna.Study) -> rate_model.RateModel | None:
        """The rate model of the study's reference points (None before they are measured)."""
        session = self.session
        return rate_model.for_study(
            study,
            cpus=session.facts.usable_cpus,
            batch_size=session.conf.batch_size,
            device=session.device,
            ranks=session.ranks,
        )

    def _predict(
        self, trial: optuna.Trial, config: PipelineConfig
    ) -> rate_model.Prediction | None:
        """The rate model's steady rate for ``config``, from the trials before this one."""
        if isinstance(trial, optuna.trial.FixedTrial):
            return None
        model = self.model(trial.study)
        return model.predict(config, rate_model.earlier(trial.study)) if model else None

    def _predict_or_skip(
        self, trial: optuna.Trial, config: PipelineConfig, head: str
    ) -> rate_model.Prediction | None:
        """The model's own guess, made before the run; a point it predicts to lose is
        skipped (``prospects.skip_reason``)."""
        predicted = self._predict(trial, config)
        both_ways = searches_both(self.session.space)
        reason = prospects.skip_reason(trial, config, predicted, both_ways)
        if reason and predicted is not None:
            rate_model.record(trial, predicted)
            store.record_skipped(trial, config, reason)
            store.set_trial_attr(trial, TrialKey.PREDICTED_TO_LOSE, True)
            log.info("%s skipped: %s%s", head, reason, best_so_far(trial))
            raise optuna.TrialPruned(reason)
        return predicted

    def _repeat(self, trial: optuna.Trial, config: PipelineConfig, earlier: FrozenTrial) -> float:
        """A config measured before is not measured again: the trial takes the earlier
        one's outcome (its value, or its pruning or failure), so the sampler learns the
        same and the budget goes to a config not yet measured."""
        store.record_repeat(trial, config, earlier)
        head = f"{'':7} trial {trial.number:<3} {config.short():<38}"
        said = f"{head} repeats trial {earlier.number}, not measured again"
        if earlier.state == TrialState.COMPLETE and earlier.value is not None:
            log.info("%s: %.1f samples/s", said, earlier.value)
            return earlier.value
        log.info("%s: %s", said, earlier.state.name.lower())
        if earlier.state == TrialState.PRUNED:
            raise optuna.TrialPruned(f"repeats trial {earlier.number}, pruned")
        raise TrialFailed(f"repeats trial {earlier.number}, which failed")

    def _skip_if_it_would_not_fit(
        self, trial: optuna.Trial, config: PipelineConfig, head: str
    ) -> None:
        # float32 crosses 4x the bytes of uint8 (whole images with augment_on=gpu: not
        # known before reading them, so that case is checked at the crop's size)
        sample_bytes = self.sample_bytes * (4 if config.transfer == "float" else 1)
        source = self.session.source
        reason = precheck(
            config,
            self.session.facts,
            sample_bytes=sample_bytes,
            ranks=self.session.ranks,
            buffer_bytes=source.buffer_bytes if isinstance(source, UserData) else 0,
        )
        if reason:
            store.record_skipped(trial, config, reason)
            log.info("%s skipped: %s%s", head, reason, best_so_far(trial))
            raise optuna.TrialPruned(reason)

    def _head(self, trial: optuna.Trial, config: PipelineConfig) -> str:
        if isinstance(trial, optuna.trial.FixedTrial):
            return f"trial {config.short()}"
        done = study_trials.finished_count(trial.study) + 1
        n_trials = self.session.conf.study.n_trials
        return f"[{done:>2}/{n_trials}] trial {trial.number:<3} {config.short():<38}"
