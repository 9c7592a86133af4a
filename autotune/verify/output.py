"""What verify hands back: verify.md (the table, printed too), verify.json (every epoch) and
the verdict as the study's user attribute ``verify`` (optuna-dashboard shows it)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from pathlib import Path
from typing import Any

import optuna

from autotune.schema import StudyConfig
from autotune.tuner import store
from autotune.tuner.storage import sqlite_file
from autotune.tuner.store import StudyKey
from autotune.verify.figures import ArmFigures
from autotune.verify.result import Verification
from autotune.verify.verdict import NO_CLAIM, Claim

log = logging.getLogger(__name__)

STUDY_KEY = StudyKey.VERIFY


def _ratio_cell(claim: Claim | None, arm: str) -> str:
    if arm == "baseline":
        return "1.00"
    if claim is None or claim.measured is None:
        return "-"
    low, high = claim.measured.iqr
    return f"{claim.measured.value:.2f} ({low:.2f}-{high:.2f})"


def _claimed_cell(claim: Claim | None) -> str:
    if claim is None:
        return ""
    return f"{claim.claimed:.2f}" if claim.claimed is not None else "-"


def _first_epoch_cell(fig: ArmFigures | None) -> str:
    if fig is None or fig.first_epoch_extra_s is None:
        return ""
    return f"{fig.first_epoch_extra_s:+.2f} s"


def table(v: Verification) -> list[str]:
    lines = [
        "| arm | what runs | samples/s | IQR | vs baseline (IQR) | claimed | verdict "
        "| first epoch |",
        "|---|---|---:|---|---:|---:|---|---:|",
    ]
    for arm in v.plan.arms:
        fig, claim = v.figures.get(arm.name), v.claim(arm.name)
        rate = f"{fig.median:.1f}" if fig else "not measured"
        iqr = f"{fig.iqr[0]:.1f}-{fig.iqr[1]:.1f}" if fig else ""
        verdict = claim.verdict if claim else ""
        lines.append(
            f"| {arm.name} | {arm.what} | {rate} | {iqr} | {_ratio_cell(claim, arm.name)} "
            f"| {_claimed_cell(claim)} | {verdict} | {_first_epoch_cell(fig)} |"
        )
    return lines


def _claim_line(claim: Claim) -> str:
    if claim.measured is None:
        return f"- {claim.arm}: {claim.verdict}"
    measured = f"{claim.measured.value:.2f}x the baseline over real epochs"
    if claim.verdict == NO_CLAIM:
        return f"- {claim.arm}: {NO_CLAIM}; measured {measured}"
    claimed = f"best.yaml claims {claim.claimed:.2f}x"
    line = f"- {claim.arm}: {claim.verdict}: {claimed}, measured {measured}"
    return line + "".join(f"\n  - likely: {cause}" for cause in claim.causes)


def _what_ran(v: Verification) -> list[str]:
    """What each arm's child process reported it ran: the proof the arms are what they say."""
    lines = []
    for arm in v.plan.arms:
        times = next((r.times for r in v.rounds.runs if r.arm == arm.name and r.times), None)
        if times is not None:
            transform = f", transforms.v2: {times.transform}" if times.transform else ""
            lines.append(
                f"- {arm.name}: `{times.dataset}` ({times.reader}{transform}), "
                f"{times.threads} torch thread(s)"
            )
    return lines


def to_markdown(v: Verification) -> str:
    plan, best = v.plan, v.checked.best
    state = "" if v.complete else " (incomplete)"
    head = [
        f"# Verify: {v.study}{state}\n",
        f"`{v.best_path}`: `{best.config.short()}`. {v.rounds.finished} of {plan.rounds} "
        f"rounds, a first epoch and {plan.epochs} timed epoch(s) per run, the arms "
        f"interleaved, each run in a fresh process; {plan.samples} samples per epoch "
        f"({plan.sizing}); model `{v.model}`, device `{v.device}`.\n",
    ]
    legend = (
        "\nsamples/s: the median over the arm's timed epochs (samples in the epoch / wall "
        "time from `iter()` to the last step done) and its interquartile range; vs baseline: "
        "the arm's median over the baseline's (the IQR's ends over the baseline's median); "
        "first epoch: what each run's first epoch took beyond a timed one (median), its "
        "one-off start (persistent workers spawned, their first round, files not yet "
        "cached), which a run of many epochs pays once.\n"
    )
    body = [*table(v), legend, *(_claim_line(c) for c in v.claims)]
    body += [f"- note: {note}" for note in v.notes]
    what_ran = _what_ran(v)
    if what_ran:
        body += ["", "What ran (reported by each arm's process):", "", *what_ran]
    return "\n".join([*head, *body]).rstrip() + "\n"


def _figures_dict(fig: ArmFigures | None) -> dict[str, Any] | None:
    if fig is None:
        return None
    out = dataclasses.asdict(fig)
    out["iqr"] = list(fig.iqr)
    return out


def to_json(v: Verification) -> dict[str, Any]:
    plan = v.plan
    return {
        "study": v.study,
        "best_yaml": str(v.best_path),
        "complete": v.complete,
        "rounds_finished": v.rounds.finished,
        "rounds": plan.rounds,
        "epochs_per_run": plan.epochs,
        "samples_per_epoch": plan.samples,
        "dataset_samples": plan.dataset_samples,
        "sizing": plan.sizing,
        "model": v.model,
        "device": v.device,
        "arms": {
            arm.name: {"what": arm.what, "figures": _figures_dict(v.figures.get(arm.name))}
            for arm in plan.arms
        },
        "claims": [dataclasses.asdict(c) for c in v.claims],
        "notes": list(v.notes),
        "runs": [dataclasses.asdict(r) for r in v.rounds.runs],
        "written": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def write(folder: Path, v: Verification, markdown: str) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    md, js = folder / "verify.md", folder / "verify.json"
    md.write_text(markdown)
    js.write_text(json.dumps(to_json(v), indent=2) + "\n")
    return md, js


def study_attr(v: Verification) -> dict[str, Any]:
    """The verdict in short, as the study's ``verify`` attribute."""
    return {
        "complete": v.complete,
        "rounds": v.rounds.finished,
        "epochs_per_run": v.plan.epochs,
        "samples_per_epoch": v.plan.samples,
        "samples_per_s": {a: round(f.median, 1) for a, f in v.figures.items() if f},
        "claims": {
            c.arm: {
                "claimed": c.claimed,
                "measured": round(c.measured.value, 3) if c.measured else None,
                "verdict": c.verdict,
            }
            for c in v.claims
        },
        "written": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def store_on_study(study_conf: StudyConfig, v: Verification) -> bool:
    """Sets the study's ``verify`` attribute; False (with a warning) where the study is not
    in the storage (a best.yaml copied without it)."""
    database = sqlite_file(study_conf.storage)
    if database is not None and not database.is_file():
        log.warning(
            "no study storage at %s: the verdict is not stored on the study", study_conf.storage
        )
        return False
    try:
        study = optuna.load_study(study_name=study_conf.name, storage=study_conf.storage)
    except KeyError:
        log.warning(
            "study %s is not in %s: the verdict is not stored on it",
            study_conf.name,
            study_conf.storage,
        )
        return False
    store.set_study_attr(study, STUDY_KEY, study_attr(v))
    return True
