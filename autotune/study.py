"""The Optuna study: storage, sampler, pruner, the enqueued baseline, the objective, and the
confirmation round that names the winner."""

from __future__ import annotations

import logging
import statistics
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import TrialState

from autotune.config import AutotuneConfig
from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.space import SearchSpace
from autotune.trial import HINTS, TrialJob, TrialOutcome, run_trial

log = logging.getLogger(__name__)

METRIC = "samples_per_s"
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
# Finalists whose confirmed medians lie within this of the top are "the same speed": the
# cheaper one (fewer workers, less memory) wins among them.
SAME_SPEED = 0.02


class TrialFailed(Exception):
    """A trial that did not produce a measurement; its reason is on the trial."""


@dataclass(frozen=True)
class Confirmed:
    """A finalist re-measured in the interleaved confirmation rounds."""

    label: str  # "trial 7" or "baseline"
    trial_number: int | None
    config: PipelineConfig
    round_medians: tuple[float, ...]
    sub_windows: tuple[float, ...]  # every sub-window rate of every round
    peak_memory_bytes: int | None

    @property
    def median(self) -> float:
        return statistics.median(self.sub_windows)

    @property
    def iqr(self) -> tuple[float, float]:
        if len(self.sub_windows) < 2:
            return (self.median, self.median)
        q = statistics.quantiles(self.sub_windows, n=4)
        return (q[0], q[2])


@dataclass(frozen=True)
class StudyResult:
    study_name: str
    storage: str
    best: PipelineConfig
    best_label: str
    best_samples_per_s: float
    best_iqr: tuple[float, float]
    baseline_samples_per_s: float | None
    ceiling_samples_per_s: float | None
    confirmed: tuple[Confirmed, ...]
    counts: dict[str, int]  # complete / pruned / failed
    failures: dict[str, int]  # failure kind -> trials
    notes: tuple[str, ...] = ()
    best_is_baseline: bool = False
    interrupted: bool = False
    measured: dict[str, Any] = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        if not self.baseline_samples_per_s:
            return None
        return self.best_samples_per_s / self.baseline_samples_per_s


def make_pruner() -> optuna.pruners.BasePruner:
    """Prunes only the clear losers: a running median (of the sub-windows so far, which
    shrugs off one slow sub-window) in the bottom quarter of what earlier trials had reached by
    the same sub-window, from the third sub-window on."""
    return optuna.pruners.PercentilePruner(75.0, n_startup_trials=4, n_warmup_steps=2)


def open_study(cfg: AutotuneConfig, fingerprint: str) -> optuna.Study:
    """Creates or resumes the study; refuses to resume one whose workload or space changed."""
    if cfg.study.storage.startswith("sqlite:///"):
        Path(cfg.study.storage.removeprefix("sqlite:///")).parent.mkdir(
            parents=True, exist_ok=True
        )
    with warnings.catch_warnings():  # multivariate and group are marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=cfg.study.seed,
            n_startup_trials=cfg.study.n_startup_trials,
            multivariate=True,
            group=True,  # conditional knobs (prefetch only with workers) form groups
        )
    study = optuna.create_study(
        study_name=cfg.study.name,
        storage=cfg.study.storage,
        direction="maximize",
        sampler=sampler,
        pruner=make_pruner(),
        load_if_exists=True,
    )
    stored = study.user_attrs.get("fingerprint")
    if stored is None:
        study.set_user_attr("fingerprint", fingerprint)
        study.set_metric_names([METRIC])
    elif stored != fingerprint:
        raise UsageError(
            f"study {cfg.study.name!r} in {cfg.study.storage} was made with another dataset, "
            "model, "
            "recipe, window or search space: pick a new study.name=... to start afresh"
        )
    return study


def _job(
    cfg: AutotuneConfig,
    source: Source,
    device: str,
    pipeline: PipelineConfig,
    kind: str = "window",
) -> TrialJob:
    return TrialJob(
        pipeline=pipeline,
        source=source,
        model=cfg.model,
        recipe=cfg.recipe,
        window=cfg.window,
        device=device,
        seed=cfg.seed,
        kind=kind,
    )  # type: ignore[arg-type]


def measure_ceiling(
    cfg: AutotuneConfig, source: Source, device: str, threads: int
) -> float | None:
    config = PipelineConfig(batch_size=cfg.batch_size, main_threads=threads)
    outcome = run_trial(
        _job(cfg, source, device, config, "ceiling"), timeout_s=cfg.study.trial_timeout
    )
    if outcome.measurement is None:
        log.warning("the ceiling could not be measured: %s", outcome.failure)
        return None
    return outcome.measurement.samples_per_s


def record(trial: optuna.Trial, config: PipelineConfig, outcome: TrialOutcome) -> None:
    """Stores a trial's figures as user attributes with readable names (the dashboard shows
    them)."""
    trial.set_user_attr("config", config.short())
    trial.set_user_attr("pipeline", config.to_dict())
    trial.set_user_attr("wall_s", round(outcome.wall_s, 2))
    if outcome.peak_memory_bytes:
        trial.set_user_attr("peak_memory_mb", round(outcome.peak_memory_bytes / 2**20, 1))
    if outcome.intermediate:
        trial.set_user_attr(
            "running_median_samples_per_s", [round(v, 1) for v in outcome.intermediate]
        )
    m = outcome.measurement
    if m is not None:
        trial.set_user_attr(
            "samples_per_s_sub_windows", [round(v, 1) for v in m.sub_window_samples_per_s]
        )
        trial.set_user_attr("spread", round(m.spread, 3))
        trial.set_user_attr("data_wait_fraction", round(m.data_wait_fraction, 3))
        trial.set_user_attr("time_to_first_batch_s", round(m.time_to_first_batch_s, 3))
        trial.set_user_attr("warmup_batches", m.warmup_batches)
    if outcome.failure is not None:
        trial.set_user_attr("failure", outcome.failure.to_dict())


class Objective:
    """``objective(trial)``: suggest, measure in a child process, record, return samples/s."""

    def __init__(
        self, cfg: AutotuneConfig, space: SearchSpace, source: Source, device: str, n_trials: int
    ) -> None:
        self.cfg, self.space, self.source, self.device = cfg, space, source, device
        self.n_trials = n_trials

    def __call__(self, trial: optuna.Trial) -> float:
        config = self.space.suggest(trial)

        def should_prune(index: int, running_median: float) -> bool:
            trial.report(running_median, index)
            return trial.should_prune()

        outcome = run_trial(
            _job(self.cfg, self.source, self.device, config),
            timeout_s=self.cfg.study.trial_timeout,
            should_prune=should_prune,
        )
        record(trial, config, outcome)
        best = _best_value(trial.study)
        done = len(trial.study.get_trials(deepcopy=False, states=_FINISHED)) + 1
        head = f"[{done:>2}/{self.n_trials}] trial {trial.number:<3} {config.short():<38}"
        if outcome.status == "pruned":
            log.info("%s pruned after sub-window %d", head, (outcome.pruned_at or 0) + 1)
            raise optuna.TrialPruned()
        if outcome.measurement is None:
            assert outcome.failure is not None
            log.info("%s FAILED %s: %s", head, outcome.failure.kind, outcome.failure.message)
            raise TrialFailed(f"{outcome.failure.kind}: {outcome.failure.message}")
        m = outcome.measurement
        best = max(best or 0.0, m.samples_per_s)
        log.info(
            "%s %8.1f samples/s (spread %3.0f%%, data wait %3.0f%%)  best %.1f",
            head,
            m.samples_per_s,
            100 * m.spread,
            100 * m.data_wait_fraction,
            best,
        )
        return m.samples_per_s


def _best_value(study: optuna.Study) -> float | None:
    values = [
        t.value
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None
    ]
    return max(values) if values else None


def confirm(
    cfg: AutotuneConfig,
    source: Source,
    device: str,
    finalists: list[tuple[str, int | None, PipelineConfig]],
) -> list[Confirmed]:
    """Re-measures the finalists interleaved (A B C A B C ...): drift hits all alike."""
    runs: dict[str, list[TrialOutcome]] = {label: [] for label, _, _ in finalists}
    for round_index in range(cfg.study.confirm_rounds):
        for label, _, config in finalists:
            outcome = run_trial(
                _job(cfg, source, device, config), timeout_s=cfg.study.trial_timeout
            )
            runs[label].append(outcome)
            rate = f"{outcome.measurement.samples_per_s:.1f}" if outcome.measurement else "failed"
            log.info(
                "confirm round %d/%d  %-10s %-40s %s",
                round_index + 1,
                cfg.study.confirm_rounds,
                label,
                config.short(),
                rate,
            )
    confirmed = []
    for label, number, config in finalists:
        measured = [o.measurement for o in runs[label] if o.measurement is not None]
        if not measured:
            continue
        peaks = [o.peak_memory_bytes for o in runs[label] if o.peak_memory_bytes]
        confirmed.append(
            Confirmed(
                label=label,
                trial_number=number,
                config=config,
                round_medians=tuple(m.samples_per_s for m in measured),
                sub_windows=tuple(v for m in measured for v in m.sub_window_samples_per_s),
                peak_memory_bytes=max(peaks) if peaks else None,
            )
        )
    return confirmed


def _finalists(
    study: optuna.Study, k: int, baseline: PipelineConfig
) -> list[tuple[str, int | None, PipelineConfig]]:
    complete = sorted(
        (t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))),
        key=lambda t: t.value or 0.0,
        reverse=True,
    )
    picked: list[tuple[str, int | None, PipelineConfig]] = [("baseline", None, baseline)]
    seen = {baseline}
    for t in complete:
        config = PipelineConfig.from_dict(t.user_attrs["pipeline"])
        if config in seen:
            continue
        seen.add(config)
        picked.append((f"trial {t.number}", t.number, config))
        if len(picked) > k:
            break
    return picked


def pick_winner(confirmed: list[Confirmed]) -> tuple[Confirmed, list[str]]:
    """The fastest confirmed finalist; among those within SAME_SPEED of it, the cheapest."""
    notes = []
    top = max(confirmed, key=lambda c: c.median)
    tied = [c for c in confirmed if c.median >= top.median * (1 - SAME_SPEED)]
    winner = min(
        tied,
        key=lambda c: (
            c.config.buffered_batches,
            c.config.num_workers,
            c.peak_memory_bytes or 0,
        ),
    )
    if winner is not top:
        notes.append(
            f"{winner.label} is within {SAME_SPEED:.0%} of {top.label} and uses fewer "
            "workers or less memory: it is the pick"
        )
    others = [c for c in confirmed if c is not winner]
    if others:
        runner_up = max(others, key=lambda c: c.median)
        if runner_up.median >= winner.iqr[0]:
            notes.append(
                f"the lead over {runner_up.label} ({runner_up.median:.1f} samples/s) is "
                "inside the winner's spread: they are equally fast on this machine"
            )
    return winner, notes


def tune(
    cfg: AutotuneConfig,
    facts: MachineFacts,
    source: Source,
    space: SearchSpace,
    device: str,
    fingerprint: str,
) -> StudyResult:
    """Runs the search (resuming a stored study), then confirms the finalists."""
    study = open_study(cfg, fingerprint)
    default_threads = torch.get_num_threads()
    if not study.get_trials(deepcopy=False):
        study.enqueue_trial(
            space.baseline_params(default_threads=default_threads), user_attrs={"role": "baseline"}
        )
    if "ceiling_samples_per_s" not in study.user_attrs:
        log.info("measuring the ceiling: the train step fed one batch already on the device")
        ceiling = measure_ceiling(cfg, source, device, facts.usable_cpus)
        if ceiling is not None:
            study.set_user_attr("ceiling_samples_per_s", round(ceiling, 1))
    ceiling = study.user_attrs.get("ceiling_samples_per_s")

    interrupted = False
    objective = Objective(cfg, space, source, device, cfg.study.n_trials)
    done = len(study.get_trials(deepcopy=False, states=_FINISHED))
    try:
        if done < cfg.study.n_trials:
            study.optimize(
                objective,
                n_trials=cfg.study.n_trials - done,
                timeout=cfg.study.timeout,
                catch=(TrialFailed,),
                gc_after_trial=False,
            )
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted: the study is saved; run the same command again to resume")

    trials = study.get_trials(deepcopy=False)
    counts = Counter(t.state.name.lower() for t in trials if t.state.is_finished())
    failures = Counter(
        t.user_attrs["failure"]["kind"]
        for t in trials
        if t.state == TrialState.FAIL and "failure" in t.user_attrs
    )
    baseline_config = _baseline_config(study, space, default_threads)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if not complete:
        return StudyResult(
            study_name=study.study_name,
            storage=cfg.study.storage,
            best=baseline_config,
            best_label="none",
            best_samples_per_s=0.0,
            best_iqr=(0.0, 0.0),
            baseline_samples_per_s=None,
            ceiling_samples_per_s=ceiling,
            confirmed=(),
            counts=dict(counts),
            failures=dict(failures),
            interrupted=interrupted,
        )

    notes: list[str] = list(space.notes)
    finalists = _finalists(study, cfg.study.confirm_top_k, baseline_config)
    confirmed: list[Confirmed] = []
    if not interrupted and cfg.study.confirm_top_k > 0:
        log.info(
            "confirming %d finalists against the baseline, %d interleaved rounds",
            len(finalists) - 1,
            cfg.study.confirm_rounds,
        )
        try:
            confirmed = confirm(cfg, source, device, finalists)
        except KeyboardInterrupt:
            interrupted = True
            confirmed = []
    if not confirmed:  # no confirmation: fall back on the search's own figures
        notes.append("finalists were not re-measured: figures are from the search")
        confirmed = [
            _from_search(study, label, number, config) for label, number, config in finalists
        ]
        confirmed = [c for c in confirmed if c.sub_windows]
    baseline = next((c for c in confirmed if c.label == "baseline"), None)
    winner, pick_notes = pick_winner(confirmed)
    notes += pick_notes
    if baseline is not None and winner is not baseline and winner.median <= baseline.median:
        notes.append("no config beat PyTorch's defaults here: the baseline is exported")
        winner = baseline
    study.set_user_attr(
        "confirmation",
        [
            {
                "label": c.label,
                "config": c.config.short(),
                "median_samples_per_s": round(c.median, 1),
                "iqr": [round(v, 1) for v in c.iqr],
                "round_medians": [round(v, 1) for v in c.round_medians],
            }
            for c in confirmed
        ],
    )
    return StudyResult(
        study_name=study.study_name,
        storage=cfg.study.storage,
        best=winner.config,
        best_label=winner.label,
        best_samples_per_s=winner.median,
        best_iqr=winner.iqr,
        baseline_samples_per_s=baseline.median if baseline else None,
        ceiling_samples_per_s=ceiling,
        confirmed=tuple(confirmed),
        counts=dict(counts),
        failures=dict(failures),
        notes=tuple(notes),
        best_is_baseline=winner is baseline,
        interrupted=interrupted,
    )


def _baseline_config(
    study: optuna.Study, space: SearchSpace, default_threads: int
) -> PipelineConfig:
    params = space.baseline_params(default_threads=default_threads)
    return space.suggest(optuna.trial.FixedTrial(params))


def _from_search(
    study: optuna.Study, label: str, number: int | None, config: PipelineConfig
) -> Confirmed:
    values: list[float] = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if PipelineConfig.from_dict(t.user_attrs["pipeline"]) == config:
            values += t.user_attrs.get("samples_per_s_sub_windows", [])
    return Confirmed(
        label, number, config, round_medians=(), sub_windows=tuple(values), peak_memory_bytes=None
    )


def failure_table(failures: dict[str, int]) -> list[tuple[str, int, str]]:
    return [(kind, n, HINTS.get(kind, HINTS["error"])) for kind, n in sorted(failures.items())]
