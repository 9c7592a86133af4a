"""What one verify found: the figures per arm, the verdict per claim and the notes that go
with them, gathered from the finished rounds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.session import Session
from autotune.verify.checks import Checked
from autotune.verify.figures import ArmFigures, arm_figures
from autotune.verify.plan import Plan
from autotune.verify.rounds import Rounds
from autotune.verify.verdict import CLAIMED_ARMS, Claim, claim_of

WIDE_SPREAD = 0.5  # an IQR wider than this share of the median is pointed out


@dataclass(frozen=True)
class Verification:
    study: str
    best_path: Path
    checked: Checked
    plan: Plan
    rounds: Rounds
    figures: dict[str, ArmFigures | None]
    claims: tuple[Claim, ...]
    notes: tuple[str, ...]
    model: str
    device: str

    @property
    def complete(self) -> bool:
        return not self.rounds.interrupted

    def claim(self, arm: str) -> Claim | None:
        return next((c for c in self.claims if c.arm == arm), None)


def summarize(session: Session, checked: Checked, plan: Plan, rounds: Rounds) -> Verification:
    """The figures of every arm over the finished rounds and the verdicts on the claims."""
    figures = {
        arm.name: arm_figures(arm.name, rounds.runs, last_round=max(1, arm.config.num_workers))
        for arm in plan.arms
    }
    configs = {arm.name: arm.config for arm in plan.arms}
    claims = tuple(
        claim_of(arm, figures, configs, checked.best) for arm in CLAIMED_ARMS if arm in configs
    )
    return Verification(
        study=session.conf.study.name,
        best_path=checked.path,
        checked=checked,
        plan=plan,
        rounds=rounds,
        figures=figures,
        claims=tuple(sorted(claims, key=lambda c: list(configs).index(c.arm))),
        notes=(*checked.notes, *_notes(plan, rounds), *_spread_notes(figures)),
        model=session.conf.model.name,
        device=session.device,
    )


def _notes(plan: Plan, rounds: Rounds) -> list[str]:
    notes = []
    if plan.samples < plan.dataset_samples:
        notes.append(
            f"epochs over a seeded subset of {plan.samples} of {plan.dataset_samples} samples "
            f"({plan.sizing}): start-up weighs more in a shorter epoch than in best.yaml's"
        )
    if rounds.interrupted:
        notes.append(
            f"interrupted: {rounds.finished} of {plan.rounds} rounds finished; the figures are "
            "theirs, the round under way was dropped"
        )
    for run in rounds.runs:
        if run.failure is not None:
            notes.append(
                f"{run.arm}, round {run.round + 1}: {run.failure.kind}: {run.failure.message} "
                f"({run.failure.hint})"
            )
    return notes


def _spread_notes(figures: dict[str, ArmFigures | None]) -> list[str]:
    notes = []
    for arm, fig in figures.items():
        if fig is None or fig.median <= 0:
            continue
        width = (fig.iqr[1] - fig.iqr[0]) / fig.median
        if width > WIDE_SPREAD:
            notes.append(
                f"the {arm} arm's epochs spread widely (IQR {fig.iqr[0]:.1f}-{fig.iqr[1]:.1f}, "
                f"{width:.0%} of its median): the machine was busy or the arm is unsteady; "
                "more rounds (verify.rounds=N) narrow the figures"
            )
    return notes
