"""The figures a config is judged by, defined once: the epoch rate, feasibility, the winner
among confirmed finalists, and the speedup over the baseline."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.pipeline import decoders
from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store
from autotune.tuner.store import BASELINE, TrialKey, is_repeat

# Finalists whose confirmed medians lie within this of the top are "the same speed": the
# cheaper one (fewer buffered batches, fewer workers, less memory) wins among them.
SAME_SPEED = 0.02


def epoch_rate(steady: float, startup_s: float, *, epoch_samples: int | None) -> float:
    """Samples/s over one epoch: the steady rate, plus each epoch's start (``startup_s``,
    beyond one batch at the steady rate, below 0 where a whole epoch timed ran faster than
    the steady rate) once per epoch."""
    seconds = epoch_samples / steady + startup_s if epoch_samples and steady > 0 else 0.0
    return epoch_samples / seconds if epoch_samples and seconds > 0 else steady


def startup_beyond_one_batch(
    time_to_first_batch_s: float, batch_size: int, steady: float
) -> float:
    """Start-up cost: the time to first batch less one batch at the steady rate."""
    return max(0.0, time_to_first_batch_s - batch_size / steady)


def startup_per_epoch(
    config: PipelineConfig,
    *,
    steady: float,
    epoch_start_s: float | None,
    time_to_first_batch_s: float,
    preparation_s: float = 0.0,
    epoch_overhead_s: float | None = None,
) -> float:
    """What each epoch costs beyond its samples at the steady rate: where the trial timed
    a whole epoch, what it took beyond them (``epoch_overhead_s``: its start, its end, and
    workers racing ahead into their buffer, then idle while it drains). Else its start
    beyond one batch at the steady rate, measured at a real epoch boundary where the trial
    made one (workers respawned, or refilled when they persist: a new epoch starts with an
    empty buffer either way). Else the run's first start:
    for DALI's own loader (it resets and refills its queue every epoch) and, in a trial of an
    older autotune, for workers that restart with every epoch. ``preparation_s``: each
    epoch's share of preparing the config's prepared copy (``Session.preparation_per_epoch``)."""
    if steady <= 0:
        return 0.0
    if epoch_overhead_s is not None:
        return preparation_s + epoch_overhead_s
    if epoch_start_s is not None:
        return preparation_s + startup_beyond_one_batch(epoch_start_s, config.batch_size, steady)
    own_loader = decoders.DECODERS.get(config.decoder)
    if config.workers_restart or (own_loader is not None and own_loader.replaces_loader):
        start = startup_beyond_one_batch(time_to_first_batch_s, config.batch_size, steady)
        return preparation_s + start
    return preparation_s


def feasible(trial: FrozenTrial) -> bool:
    """Within ``study.memory_budget_gb``: a trial over it is never a finalist or a best."""
    return store.trial_attr(trial, TrialKey.CONSTRAINT, 0.0) <= 0


def feasible_complete(study: optuna.Study) -> list[FrozenTrial]:
    """The complete trials that may be named best (a repeat is its earlier trial's)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [t for t in complete if feasible(t) and not is_repeat(t)]


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals (IQRs) overlap: the configs are a tie, not ranked."""
    return a[0] <= b[1] and b[0] <= a[1]


def run_to_run(confirmed: list[Confirmed]) -> float:
    """How far two runs of one config differ here: the median, over the configs confirmed in
    two rounds or more, of their rounds' range over their median rate (0 where none was).
    One run's sub-windows hold none of this variation (the machine's state, the workers'
    start), so a comparison of single runs is read against it."""
    ranges = [
        (max(rates) - min(rates)) / statistics.median(rates)
        for c in confirmed
        if len(rates := c.round_rates) >= 2 and statistics.median(rates) > 0
    ]
    return statistics.median(ranges) if ranges else 0.0


def speedup(rate: float | None, baseline: float | None) -> float | None:
    """``rate`` over the baseline's, where both were measured."""
    if rate is None or not baseline:
        return None
    return rate / baseline


@dataclass(frozen=True)
class Confirmed:
    """A finalist's re-measured figures. Rates are samples/s over an epoch when
    ``epoch_samples`` is set (start-up charged per epoch), else steady rates."""

    label: str  # "trial 7" or "baseline"
    trial_number: int | None
    config: PipelineConfig
    sub_windows: tuple[float, ...]  # each round's settled sub-windows (its last set)
    startup_s: float = 0.0  # median cost of an epoch's start beyond one batch
    epoch_samples: int | None = None
    peak_memory_bytes: int | None = None
    rounds: int = 0
    spread: float | None = None  # the median run's spread reached (Measurement.spread)
    round_rates: tuple[float, ...] = ()  # each round's rate: how far runs of it differ
    raced_out: int | None = None  # the round after which it left the race (``racing``)

    def _project(self, steady: float) -> float:
        return epoch_rate(steady, self.startup_s, epoch_samples=self.epoch_samples)

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
        # inclusive: quartiles inside the measured range (with few spans, the exclusive
        # method reaches past the slowest and fastest, calling ties what was measured apart)
        q = statistics.quantiles(self.sub_windows, n=4, method="inclusive")
        return (self._project(q[0]), self._project(q[2]))

    def to_dict(self) -> dict[str, object]:
        """The row stored on the study (``StudyKey.CONFIRMATION``) and shown in reports."""
        return {
            "label": self.label,
            "trial_number": self.trial_number,
            "config": self.config.short(),
            "samples_per_s": round(self.median, 1),
            "steady": round(self.steady, 1),
            "iqr": [round(v, 1) for v in self.iqr],
            "rounds": self.rounds,
            "spread": None if self.spread is None else round(self.spread, 3),
            "raced_out": self.raced_out,
            "pipeline": self.config.to_dict(),
            "peak_memory_mb": round(self.peak_memory_bytes / 2**20, 1)
            if self.peak_memory_bytes
            else None,
        }


def pick_winner(confirmed: list[Confirmed]) -> tuple[Confirmed, list[str]]:
    """The fastest; among those within SAME_SPEED of it, the cheapest. Notes say why.

    Finalists whose IQRs overlap are ties (``ties``): the report marks them, and no note
    ranks configs that differ in several settings."""
    notes = []
    top = max(confirmed, key=lambda c: c.median)
    tied = [c for c in confirmed if c.median >= top.median * (1 - SAME_SPEED)]
    winner = min(
        tied,
        key=lambda c: (c.config.buffered_batches, c.config.num_workers, c.peak_memory_bytes or 0),
    )
    if winner is not top:
        notes.append(
            f"{winner.label} is the pick among the finalists within {SAME_SPEED:.0%} of the "
            f"fastest: the one that {_cheaper_by(winner, tied)}"
        )
    return winner, notes


def _cheaper_by(winner: Confirmed, tied: list[Confirmed]) -> str:
    """What made ``winner`` the cheapest of ``tied``, in words."""
    others = [c for c in tied if c is not winner]
    if all(winner.config.buffered_batches < c.config.buffered_batches for c in others):
        return f"buffers fewest batches ({winner.config.buffered_batches})"
    if all(winner.config.num_workers < c.config.num_workers for c in others):
        return f"uses fewest workers ({winner.config.num_workers})"
    return "buffers fewest batches, then uses fewest workers, then least memory"


def ties(rows: list[tuple[str, float, tuple[float, float]]]) -> dict[str, str]:
    """Rank of each (label, median, IQR), fastest first. A row whose IQR overlaps the IQR of
    the first row of the rank above shares that rank, and both read "=N": a tie, not ranked."""
    ranked: dict[str, str] = {}
    leader: tuple[str, int, tuple[float, float]] | None = None
    for place, (label, _, iqr) in enumerate(sorted(rows, key=lambda r: -r[1]), start=1):
        if leader is not None and overlaps(iqr, leader[2]):
            ranked[label] = ranked[leader[0]] = f"={leader[1]}"
            continue
        leader = (label, place, iqr)
        ranked[label] = str(place)
    return ranked


def _pick_beating_the_baseline(
    confirmed: list[Confirmed], way: str
) -> tuple[Confirmed, list[str]]:
    """``pick_winner``, but never a config that is not faster than the baseline beyond the
    spread (slower, or a tie: their IQRs overlap): then the baseline."""
    winner, notes = pick_winner(confirmed)
    base = next((c for c in confirmed if c.label == BASELINE), None)
    if winner is base:
        notes.append("nothing beat the baseline here: it was the fastest of the finalists")
    elif base is not None:
        if winner.median <= base.median:
            notes.append("nothing beat the baseline here: the baseline's settings are kept")
            winner = base
        elif overlaps(winner.iqr, base.iqr):
            notes.append(
                "nothing beat the baseline beyond the spread here (the fastest ties with it): "
                "the baseline's settings are kept"
            )
            winner = base
    return winner, [f"{way}: {n}" for n in notes]


def pick_each_way(
    confirmed: list[Confirmed],
) -> tuple[Confirmed, Confirmed | None, list[str]]:
    """The pick for the whole tuned pipeline (``build_loader``: any config), the pick for the
    user's pipeline as it is (``loader_kwargs``: among the as-is configs, the baseline one of
    them), and the notes that explain them. None for the second where none was confirmed.
    A finalist that left the race (``racing``) is no pick."""
    confirmed = [c for c in confirmed if c.raced_out is None]
    winner, notes = _pick_beating_the_baseline(confirmed, "build_loader")
    as_is = [c for c in confirmed if c.config.as_is]
    if not as_is:
        return winner, None, notes
    as_is_winner, as_is_notes = _pick_beating_the_baseline(as_is, "loader_kwargs")
    return winner, as_is_winner, notes + as_is_notes
