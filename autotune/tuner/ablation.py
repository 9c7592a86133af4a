"""What each setting of the winner is worth: the winner beside itself with one setting put
back to what PyTorch does by default (the decoder: swapped for each other decoder of the
space), measured interleaved in the same rounds, within a share of the search's time.

Importances say which settings moved samples/s across the search; this says what each
setting of *the pick* buys on this machine, in comparisons that differ in one setting only.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.pipeline import decoders
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.runtime.trial import run_trial
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner import store
from autotune.tuner.confirm import confirm
from autotune.tuner.metrics import Confirmed, overlaps
from autotune.tuner.store import TrialKey

log = logging.getLogger(__name__)

WINNER = "winner"
NO_EFFECT = "no measurable effect here"
FASTER = "this is"  # a variant faster than the winner beyond the spread
# PyTorch's default for each setting the tuner chooses, in the order they are measured when
# the budget allows only some; the decoder comes first and is swapped, not put back
PYTORCH_DEFAULTS: dict[str, Any] = {
    "num_workers": 0,
    "main_threads": None,  # torch's own thread count: the baseline's
    "persistent_workers": False,
    "prefetch_factor": None,  # DataLoader's 2
    "pin_memory": False,
    "augment_on": "cpu",
    "transfer": "float",  # normalized in the workers, as the tutorial does
    "device_prefetch": False,
    "channels_last": False,
    "batch_size": None,  # the baseline's
}


@dataclass(frozen=True)
class Variant:
    """The winner with one setting changed."""

    knob: str
    value: Any  # what the setting is put back to (or the decoder swapped for)
    config: PipelineConfig

    @property
    def label(self) -> str:
        return f"{self.knob}={self.value}"


def variants(
    winner: PipelineConfig, baseline: PipelineConfig, decoder_choices: list[str]
) -> list[Variant]:
    """The winner with each setting that differs from PyTorch's default put back to it, and
    with each other decoder of ``decoder_choices``; the ones that would be the winner again,
    or another variant again, left out. Decoders first: they differ the most."""
    out: list[Variant] = []
    seen = {winner}

    def add(knob: str, value: Any, config: PipelineConfig) -> None:
        if config not in seen:
            seen.add(config)
            out.append(Variant(knob, value, config))

    full_first = sorted(
        (d for d in decoder_choices if d != winner.decoder),
        key=lambda d: (d == AS_IS, _reduces(d)),  # full decodes, then reduced, then as it is
    )
    for name in full_first:
        add("decoder", name, _with(winner, decoder=name))
    for knob, default in PYTORCH_DEFAULTS.items():
        if default is None and knob in ("main_threads", "batch_size"):
            default = getattr(baseline, knob)
        current = getattr(winner, knob)
        if knob == "prefetch_factor":
            if not winner.num_workers or (current or 2) == 2:
                continue
            add(knob, 2, _with(winner, prefetch_factor=None))
            continue
        if current == default or (knob == "main_threads" and default is None):
            continue
        add(knob, default, _with(winner, **{knob: default}))
    return out


def _reduces(decoder: str) -> bool:
    found = decoders.DECODERS.get(decoder)
    return bool(found and found.can_reduce)


def _with(config: PipelineConfig, **changes: Any) -> PipelineConfig:
    """``config`` with ``changes``; no workers: no prefetch factor or persistence either."""
    if changes.get("num_workers") == 0:
        changes.update(prefetch_factor=None, persistent_workers=False)
    return dataclasses.replace(config, **changes)


def effect(row: Confirmed, winner: Confirmed) -> str:
    """In words: what the winner's setting buys over this row, or that it makes no
    measurable difference (their IQRs overlap)."""
    if overlaps(row.iqr, winner.iqr):
        return NO_EFFECT
    if row.median < winner.median:
        return f"the winner's setting is worth {winner.median / row.median:.2f}x"
    return f"{FASTER} {row.median / winner.median:.2f}x the winner: the winner's setting costs"


@dataclass(frozen=True)
class Ablation:
    """The winner and its variants, measured in the same interleaved rounds."""

    winner: dict[str, Any]  # the winner's row in these rounds (Confirmed.to_dict())
    rows: tuple[dict[str, Any], ...]  # one per variant: knob, values, figures, effect
    left_out: tuple[str, ...]  # variants the budget did not allow
    seconds: float  # what the ablation took
    search_seconds: float  # what the search took, all its trials
    budget: float  # study.ablation_budget

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ablation:
        return cls(
            winner=data["winner"],
            rows=tuple(data["rows"]),
            left_out=tuple(data["left_out"]),
            seconds=data["seconds"],
            search_seconds=data["search_seconds"],
            budget=data["budget"],
        )


def search_seconds(study: optuna.Study) -> float:
    """The search's time: every finished trial's wall time (resumed runs included)."""
    trials = study.get_trials(deepcopy=False, states=store.FINISHED)
    return sum(t.user_attrs.get(TrialKey.WALL_S, 0.0) for t in trials)


def _seconds_per_run(study: optuna.Study) -> float | None:
    """What one measured run costs: the complete trials' median wall time."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    walls = [t.user_attrs[TrialKey.WALL_S] for t in complete if TrialKey.WALL_S in t.user_attrs]
    return statistics.median(walls) if walls else None


def _within_budget(
    session: Session, study: optuna.Study, planned: list[Variant]
) -> tuple[list[Variant], list[Variant]] | None:
    """The planned variants that ``study.ablation_budget`` of the search's time allows, and
    the rest; None where nothing says what a run costs, or the budget is 0."""
    cfg = session.config.study
    per_run = _seconds_per_run(study)
    if per_run is None or cfg.ablation_budget <= 0:
        return None
    spent_on_search, rounds = search_seconds(study), cfg.confirm_rounds
    fits = max(0, int(cfg.ablation_budget * spent_on_search // (rounds * per_run)) - 1)
    if fits < len(planned):
        log.info(
            "what each setting is worth: %d of %d variants fit in study.ablation_budget "
            "(%.0f%% of the search's %.0f s at ~%.0f s a run, %d rounds with the winner)",
            fits,
            len(planned),
            100 * cfg.ablation_budget,
            spent_on_search,
            per_run,
            rounds,
        )
    return planned[:fits], planned[fits:]


def _row(variant: Variant, winner: PipelineConfig, row: Confirmed, again: Confirmed) -> dict:
    """A variant's row of the table: its figures beside the winner's of the same rounds."""
    return {
        "knob": variant.knob,
        "winner_value": getattr(winner, variant.knob),
        "value": variant.value,
        "config": variant.config.short(),
        "samples_per_s": round(row.median, 1),
        "iqr": [round(x, 1) for x in row.iqr],
        "ratio": round(row.median / again.median, 3),
        "effect": effect(row, again),
    }


def ablate(
    session: Session,
    study: optuna.Study,
    winner: Confirmed,
    baseline: PipelineConfig,
    *,
    run: Run = run_trial,
) -> Ablation | None:
    """Measures the winner's variants that fit in ``study.ablation_budget`` of the search's
    time, interleaved with the winner; None where the winner has none, the budget is 0, or
    the rounds were stopped."""
    cfg = session.config.study
    decoder_knob = next((k for k in session.space.knobs if k.name == "decoder"), None)
    choices = decoder_knob.values() if decoder_knob is not None else []
    planned = variants(winner.config, baseline, choices)
    split = _within_budget(session, study, planned) if planned else None
    if split is None:
        return None
    measured, left_out = split
    spent_on_search = round(search_seconds(study), 1)
    if not measured:
        labels = tuple(v.label for v in left_out)
        return Ablation({}, (), labels, 0.0, spent_on_search, cfg.ablation_budget)
    log.info(
        "what each setting is worth: %d variants of the winner, %d interleaved rounds",
        len(measured),
        cfg.confirm_rounds,
    )
    started = time.monotonic()
    picked = [(WINNER, winner.trial_number, winner.config)]
    picked += [(v.label, None, v.config) for v in measured]
    rows = confirm(session, picked, rounds=cfg.confirm_rounds, run=run, stage="worth")
    confirmed = {c.label: c for c in rows}
    again = confirmed.get(WINNER)
    if again is None:  # stopped, or the winner failed in these rounds
        return None
    kept = [v for v in measured if v.label in confirmed]  # one failed every round: left out
    return Ablation(
        again.to_dict(),
        tuple(_row(v, winner.config, confirmed[v.label], again) for v in kept),
        tuple(v.label for v in [*left_out, *(v for v in measured if v not in kept)]),
        round(time.monotonic() - started, 1),
        spent_on_search,
        cfg.ablation_budget,
    )


def reduced_decode_note(ablation: Ablation, winner: PipelineConfig) -> str | None:
    """What decoding at reduced size bought: the winner against itself at the fastest full
    decode, the other settings the same."""
    if not (_reduces(winner.decoder) and winner.augment_on == "cpu"):
        return None
    full = [
        r
        for r in ablation.rows
        if r["knob"] == "decoder" and r["value"] != AS_IS and not _reduces(r["value"])
    ]
    if not full:
        return None
    best = max(full, key=lambda r: r["samples_per_s"])
    if best["effect"] == NO_EFFECT:
        return (
            f"reduced decode ({winner.decoder}) has no measurable effect against full decode "
            f"({best['value']}) at the winner's other settings"
        )
    return (
        f"reduced decode ({winner.decoder}) is {1 / best['ratio']:.2f}x the winner at full "
        f"decode ({best['value']}, the other settings the same)"
    )


def faster_note(ablation: Ablation) -> str | None:
    """The variants that beat the winner beyond the spread, measured in the same rounds: the
    search missed them, and the pick is not changed on one ablation's word."""
    faster = [r for r in ablation.rows if r["effect"].startswith(FASTER)]
    if not faster:
        return None
    named = ", ".join(f"{r['knob']}={r['value']} ({r['ratio']:.2f}x)" for r in faster)
    return (
        f"the winner with {named} measured faster than the winner in the same rounds, beyond "
        "the spread: the search did not find it; raise study.n_trials and run again to "
        "search and confirm it"
    )
