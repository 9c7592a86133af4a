"""``python -m autotune mode=verify``: checks best.yaml's figures in real epochs.

The arms, each what a user runs (``runtime.epochs``): the PyTorch tutorial pipeline (or the
user's own Dataset and collate in a plain DataLoader), the same Dataset with
``loader_kwargs(best)``, and, of an image folder, ``build_loader(source, best)``; each run in
a fresh process, interleaved over ``verify.rounds`` rounds of a first epoch (the run's one-off
start, timed apart) and ``verify.epochs`` timed epochs. Writes
``studies/<study>/verify.md`` and ``verify.json`` and sets the study's ``verify`` attribute.
"""

from __future__ import annotations

import logging
from pathlib import Path

from autotune.runtime.lock import host_lock
from autotune.runtime.stop import exit_status, stoppable
from autotune.runtime.trial import run_trial
from autotune.session import Session
from autotune.session.session import Run
from autotune.verify.checks import check
from autotune.verify.output import store_on_study, to_markdown, write
from autotune.verify.plan import Plan, make_plan
from autotune.verify.result import Verification, summarize
from autotune.verify.rounds import run_rounds
from autotune.verify.verdict import NOT_MEASURED

log = logging.getLogger(__name__)


def run(session: Session, *, run: Run = run_trial) -> int:
    """``mode=verify``; returns the exit code: 0 done, 1 a claim could not be measured, 130
    (Ctrl-C) or 143 (SIGTERM) interrupted, the finished rounds kept. Bad input raises
    ``UsageError`` before anything is written."""
    checked = check(session)
    plan = make_plan(session, checked)
    _announce(plan, checked.notes)
    with host_lock(Path(session.conf.studies_dir)), stoppable(run) as (stop, run_stoppable):
        rounds = run_rounds(plan, run_stoppable, stop)
    verification = summarize(session, checked, plan, rounds)
    _hand_back(session, verification)
    if rounds.interrupted:
        log.warning(
            "interrupted: verify.json keeps the %d finished round(s); run the same command "
            "again for all of them",
            rounds.finished,
        )
        return exit_status()
    return 1 if any(c.verdict == NOT_MEASURED for c in verification.claims) else 0


def _announce(plan: Plan, notes: tuple[str, ...]) -> None:
    for note in notes:
        log.warning("verify: %s", note)
    estimate = f", about {plan.estimate_s / 60:.1f} min" if plan.estimate_s else ""
    log.info(
        "verify: %d arms x %d rounds x (a first epoch + %d timed) of %d samples (%s)%s",
        len(plan.arms),
        plan.rounds,
        plan.epochs,
        plan.samples,
        plan.sizing,
        estimate,
    )


def _hand_back(session: Session, verification: Verification) -> None:
    """verify.md and verify.json beside best.yaml, the table printed, the study's attribute."""
    text = to_markdown(verification)
    md, js = write(verification.best_path.parent, verification, text)
    print(text, flush=True)
    print(f"written to {md} and {js}", flush=True)
    store_on_study(session.conf.study, verification)
