"""One trial of the search: suggest a config, pre-check it, measure it in a child process,
record what was seen, and return the rate Optuna maximizes."""

from __future__ import annotations

import logging
from collections.abc import Callable

import optuna

from autotune.machine import MachineFacts
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.runtime.trial import TrialJob, TrialOutcome, run_trial
from autotune.schema import AutotuneConfig
from autotune.session.space import SearchSpace
from autotune.tuner.progress import FINISHED, best_so_far

log = logging.getLogger(__name__)


class TrialFailed(Exception):
    """A trial that did not produce a measurement; its reason is on the trial."""


def make_job(
    cfg: AutotuneConfig,
    source: Source,
    device: str,
    pipeline: PipelineConfig,
    kind: str = "window",
) -> TrialJob:
    limit = cfg.study.trial_memory_limit_gb
    return TrialJob(
        pipeline=pipeline,
        source=source,
        model=cfg.model,
        recipe=cfg.recipe,
        window=cfg.window,
        device=device,
        seed=cfg.seed,
        kind=kind,  # type: ignore[arg-type]
        memory_limit_bytes=int(limit * 2**30) if limit else None,
    )


def epoch_rate(
    steady: float, startup_s: float, *, config: PipelineConfig, epoch_samples: int | None
) -> float:
    """Samples/s over one epoch: the steady rate, plus worker start-up once per epoch.

    ``startup_s`` is the time to first batch beyond one batch at the steady rate. Persistent
    workers pay it once per run, not per epoch, so it is not charged to them.
    """
    if not epoch_samples or steady <= 0 or (config.persistent_workers and config.num_workers):
        return steady
    return epoch_samples / (epoch_samples / steady + startup_s)


def startup_beyond_one_batch(
    time_to_first_batch_s: float, batch_size: int, steady: float
) -> float:
    """Start-up cost: the time to first batch less one batch at the steady rate."""
    return max(0.0, time_to_first_batch_s - batch_size / steady)


def precheck(config: PipelineConfig, facts: MachineFacts, *, sample_bytes: int) -> str | None:
    """Why this config would exhaust shared or host memory, or None if it fits.

    Workers hand batches over through /dev/shm: ``num_workers × prefetch_factor`` batches are
    in flight, and pinning copies each once more into page-locked host memory.
    """
    in_flight = config.buffered_batches * config.batch_size * sample_bytes
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
    host = in_flight * (2 if config.pin_memory else 1)
    if host > 0.5 * facts.memory_available_bytes:
        return (
            f"~{host // mib} MiB of buffered batches, {facts.memory_available_bytes // mib} MiB "
            "of RAM available: lower num_workers x prefetch_factor or batch_size"
        )
    return None


def record(trial: optuna.Trial, config: PipelineConfig, outcome: TrialOutcome) -> None:
    """Stores a trial's figures as user attributes with readable names (the dashboard shows
    them)."""
    attrs: dict[str, object] = {
        "config": config.short(),
        "pipeline": config.to_dict(),
        "wall_s": round(outcome.wall_s, 2),
    }
    if outcome.peak_memory_bytes:
        attrs["peak_memory_mb"] = round(outcome.peak_memory_bytes / 2**20, 1)
    m = outcome.measurement
    if m is not None:
        attrs.update(
            samples_per_s_steady=round(m.samples_per_s, 1),
            samples_per_s_sub_windows=[round(v, 1) for v in m.sub_window_samples_per_s],
            spread=round(m.spread, 3),
            data_wait_fraction=round(m.data_wait_fraction, 3),
            time_to_first_batch_s=round(m.time_to_first_batch_s, 3),
            warmup_batches=m.warmup_batches,
        )
        if m.gpu_peak_memory_bytes is not None:
            attrs["gpu_peak_memory_mb"] = round(m.gpu_peak_memory_bytes / 2**20, 1)
        gpu_utilization = getattr(m, "gpu_utilization_pct", None)  # None without a GPU
        if gpu_utilization is not None:
            attrs["gpu_utilization_pct"] = round(gpu_utilization, 1)
    if outcome.status == "pruned":
        attrs["pruned_after_sub_window"] = (outcome.pruned_at or 0) + 1
    if outcome.failure is not None:
        attrs["failure"] = outcome.failure.to_dict()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)


class Objective:
    """``objective(trial)``: suggest, pre-check, measure in a child process, record.

    Returns samples/s over an epoch (``study.epoch_aware``) or the steady rate.
    """

    def __init__(
        self,
        cfg: AutotuneConfig,
        space: SearchSpace,
        source: Source,
        device: str,
        facts: MachineFacts,
        *,
        run: Callable[..., TrialOutcome] = run_trial,
    ) -> None:
        self.cfg, self.space, self.source, self.device, self.facts = (
            cfg,
            space,
            source,
            device,
            facts,
        )
        self.run = run
        crop = cfg.recipe.crop_size
        self.sample_bytes = 3 * crop * crop  # uint8 CHW crossing from the workers
        self.epoch_samples = (
            len(source) // cfg.batch_size * cfg.batch_size if cfg.study.epoch_aware else None
        )

    def __call__(self, trial: optuna.Trial) -> float:
        config = self.space.suggest(trial)
        head = self._head(trial, config)
        # float32 crosses 4x the bytes of uint8 (whole images with augment_on=gpu: not
        # known before reading them, so that case is checked at the crop's size)
        sample_bytes = self.sample_bytes * (4 if config.transfer == "float" else 1)
        reason = precheck(config, self.facts, sample_bytes=sample_bytes)
        if reason:
            trial.set_user_attr("config", config.short())
            trial.set_user_attr("skipped", reason)
            log.info("%s skipped: %s%s", head, reason, best_so_far(trial))
            raise optuna.TrialPruned(reason)

        def should_prune(index: int, running_median: float) -> bool:
            trial.report(running_median, index)
            return trial.should_prune()

        outcome = self.run(
            make_job(self.cfg, self.source, self.device, config),
            timeout_s=self.cfg.study.trial_timeout,
            should_prune=should_prune,
        )
        record(trial, config, outcome)
        budget = self.cfg.study.memory_budget_gb
        if budget is not None and outcome.peak_memory_bytes:
            trial.set_user_attr("constraint", outcome.peak_memory_bytes / 2**30 - budget)
        if outcome.status == "pruned":
            log.info(
                "%s pruned after sub-window %d%s",
                head,
                (outcome.pruned_at or 0) + 1,
                best_so_far(trial),
            )
            raise optuna.TrialPruned()
        if outcome.measurement is None:
            assert outcome.failure is not None
            log.info(
                "%s FAILED %s: %s%s",
                head,
                outcome.failure.kind,
                outcome.failure.message,
                best_so_far(trial),
            )
            raise TrialFailed(f"{outcome.failure.kind}: {outcome.failure.message}")
        m = outcome.measurement
        value = epoch_rate(
            m.samples_per_s,
            startup_beyond_one_batch(m.time_to_first_batch_s, config.batch_size, m.samples_per_s),
            config=config,
            epoch_samples=self.epoch_samples,
        )
        trial.set_user_attr("samples_per_s_epoch", round(value, 1))
        log.info(
            "%s %7.1f samples/s (steady %.1f, spread %3.0f%%, data wait %3.0f%%)%s",
            head,
            value,
            m.samples_per_s,
            100 * m.spread,
            100 * m.data_wait_fraction,
            best_so_far(trial, value),
        )
        return value

    def _head(self, trial: optuna.Trial, config: PipelineConfig) -> str:
        if isinstance(trial, optuna.trial.FixedTrial):
            return f"trial {config.short()}"
        done = len(trial.study.get_trials(deepcopy=False, states=FINISHED)) + 1
        return (
            f"[{done:>2}/{self.cfg.study.n_trials}] trial {trial.number:<3} {config.short():<38}"
        )
