"""Naming a winner: the finalists and the baseline re-measured interleaved (A B C A B C ...),
so that drift on a shared machine hits all of them alike."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from autotune.pipeline import decoders
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.runtime.trial import TrialOutcome, run_trial
from autotune.schema import AutotuneConfig
from autotune.tuner.objective import epoch_rate, make_job, startup_beyond_one_batch

log = logging.getLogger(__name__)

# Finalists whose confirmed medians lie within this of the top are "the same speed": the
# cheaper one (fewer buffered batches, fewer workers, less memory) wins among them.
SAME_SPEED = 0.02

Finalist = tuple[str, int | None, PipelineConfig]  # label, trial number, config


@dataclass(frozen=True)
class Confirmed:
    """A finalist's re-measured figures. Rates are samples/s over an epoch when
    ``epoch_samples`` is set (start-up charged per epoch), else steady rates."""

    label: str  # "trial 7" or "baseline"
    trial_number: int | None
    config: PipelineConfig
    sub_windows: tuple[float, ...]  # steady rates of every sub-window of every round
    startup_s: float = 0.0  # median start-up beyond one batch
    epoch_samples: int | None = None
    peak_memory_bytes: int | None = None
    rounds: int = 0

    def _project(self, steady: float) -> float:
        return epoch_rate(
            steady, self.startup_s, config=self.config, epoch_samples=self.epoch_samples
        )

    @property
    def steady(self) -> float:
        return statistics.median(self.sub_windows)

    @property
    def median(self) -> float:
        return self._project(self.steady)

    @property
    def iqr(self) -> tuple[float, float]:
        if len(self.sub_windows) < 2:
            return (self.median, self.median)
        q = statistics.quantiles(self.sub_windows, n=4)
        return (self._project(q[0]), self._project(q[2]))

    def to_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "config": self.config.short(),
            "samples_per_s": round(self.median, 1),
            "steady": round(self.steady, 1),
            "iqr": [round(v, 1) for v in self.iqr],
            "rounds": self.rounds,
        }


def reduces(config: PipelineConfig) -> bool:
    """Whether the config decodes below full resolution where the recipe allows (in the
    workers: crops drawn on the device need the whole image, so this is conservative)."""
    return decoders.DECODERS[config.decoder].can_reduce and config.augment_on == "cpu"


def finalists(study: optuna.Study, k: int, baseline: PipelineConfig) -> list[Finalist]:
    """The baseline and the ``k`` best distinct feasible configs of the search.

    When the finalists all decode at reduced size, the best full-resolution decode joins them:
    the report can then say, from the same interleaved rounds, what reducing was worth.
    """
    complete = sorted(
        (
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("constraint", 0.0) <= 0
        ),  # over the memory budget: never exported
        key=lambda t: t.value or 0.0,
        reverse=True,
    )
    picked: list[Finalist] = [("baseline", None, baseline)]
    seen = {baseline}
    full_decode: Finalist | None = None
    for t in complete:
        config = PipelineConfig.from_dict(t.user_attrs["pipeline"])
        if config in seen:
            continue
        seen.add(config)
        finalist = (f"trial {t.number}", t.number, config)
        if len(picked) <= k:
            picked.append(finalist)
        elif full_decode is None and not reduces(config):
            full_decode = finalist
    if k and full_decode is not None and all(reduces(c) for _, _, c in picked[1:]):
        picked.append(full_decode)
    return picked


def confirm(
    cfg: AutotuneConfig,
    source: Source,
    device: str,
    picked: list[Finalist],
    *,
    epoch_samples: int | None,
    run: Callable[..., TrialOutcome] = run_trial,
) -> list[Confirmed]:
    """Re-measures ``picked`` for ``cfg.study.confirm_rounds`` interleaved rounds."""
    runs: dict[str, list[TrialOutcome]] = {label: [] for label, _, _ in picked}
    for round_index in range(cfg.study.confirm_rounds):
        for label, _, config in picked:
            outcome = run(make_job(cfg, source, device, config), timeout_s=cfg.study.trial_timeout)
            if outcome.failure is not None and outcome.failure.kind == "interrupted":
                return []
            runs[label].append(outcome)
            rate = f"{outcome.measurement.samples_per_s:.1f}" if outcome.measurement else "failed"
            log.info(
                "confirm round %d/%d  %-10s %-38s steady %s",
                round_index + 1,
                cfg.study.confirm_rounds,
                label,
                config.short(),
                rate,
            )
    confirmed = []
    for label, number, config in picked:
        measured = [o.measurement for o in runs[label] if o.measurement is not None]
        if not measured:
            continue
        peaks = [o.peak_memory_bytes for o in runs[label] if o.peak_memory_bytes]
        confirmed.append(
            Confirmed(
                label=label,
                trial_number=number,
                config=config,
                sub_windows=tuple(v for m in measured for v in m.sub_window_samples_per_s),
                startup_s=statistics.median(
                    startup_beyond_one_batch(
                        m.time_to_first_batch_s, config.batch_size, m.samples_per_s
                    )
                    for m in measured
                ),
                epoch_samples=epoch_samples,
                peak_memory_bytes=max(peaks) if peaks else None,
                rounds=len(measured),
            )
        )
    return confirmed


def from_search(
    study: optuna.Study, picked: list[Finalist], *, epoch_samples: int | None
) -> list[Confirmed]:
    """The search's own figures for ``picked``, where there was no confirmation round."""
    out = []
    for label, number, config in picked:
        trials = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if PipelineConfig.from_dict(t.user_attrs["pipeline"]) == config
        ]
        values = [v for t in trials for v in t.user_attrs.get("samples_per_s_sub_windows", [])]
        if not values:
            continue
        startup = statistics.median(
            startup_beyond_one_batch(
                t.user_attrs["time_to_first_batch_s"],
                config.batch_size,
                t.user_attrs["samples_per_s_steady"],
            )
            for t in trials
        )
        peaks = [t.user_attrs.get("peak_memory_mb", 0) * 2**20 for t in trials]
        out.append(
            Confirmed(
                label,
                number,
                config,
                tuple(values),
                startup,
                epoch_samples,
                int(max(peaks)) or None,
            )
        )
    return out


def reduced_decode_note(winner: Confirmed, confirmed: list[Confirmed]) -> str | None:
    """What decoding at reduced size bought, measured against the best full decode."""
    if not reduces(winner.config):
        return None
    full = [c for c in confirmed if not reduces(c.config) and c.label != "baseline"]
    if not full:
        return None
    best_full = max(full, key=lambda c: c.median)
    return (
        f"reduced decode ({winner.config.decoder}) is {winner.median / best_full.median:.2f}x "
        f"the best full-resolution decode ({best_full.label}, {best_full.config.short()}: "
        f"{best_full.median:.1f} samples/s)"
    )


def pick_winner(confirmed: list[Confirmed]) -> tuple[Confirmed, list[str]]:
    """The fastest; among those within SAME_SPEED of it, the cheapest. Notes say why."""
    notes = []
    top = max(confirmed, key=lambda c: c.median)
    tied = [c for c in confirmed if c.median >= top.median * (1 - SAME_SPEED)]
    winner = min(
        tied,
        key=lambda c: (c.config.buffered_batches, c.config.num_workers, c.peak_memory_bytes or 0),
    )
    if winner is not top:
        notes.append(
            f"{winner.label} is within {SAME_SPEED:.0%} of {top.label} and buffers "
            "fewer batches or uses fewer workers or less memory: it is the pick"
        )
        return winner, notes
    others = [c for c in confirmed if c is not winner]
    if others:
        runner_up = max(others, key=lambda c: c.median)
        if runner_up.median >= winner.iqr[0]:
            notes.append(
                f"the lead over {runner_up.label} ({runner_up.median:.1f} samples/s) "
                "is inside the winner's spread: they are equally fast on this machine"
            )
    return winner, notes
