"""Progress while a study runs: the best so far, and a bar over the study's trials."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import TextIO

import optuna
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from autotune.tuner.study_trials import best_value, finished_count


def best_so_far(trial: optuna.Trial, value: float | None = None) -> str:
    study = getattr(trial, "study", None)  # FixedTrial has none
    values = [v for v in (value, best_value(study) if study else None) if v is not None]
    return f"  best {max(values):.1f}" if values else ""


BAR_FORMAT = "{desc} {n_fmt}/{total_fmt} trials |{bar}| {elapsed}<{remaining}{postfix}"


class StudyProgress:
    """A bar over the study's trials, drawn on a terminal only: piped output gets the
    per-trial lines alone (no carriage returns), and ``quiet`` gets neither.

    Use as ``with StudyProgress(n, done, quiet=False) as progress:`` and pass ``progress`` to
    ``study.optimize(callbacks=[...])``; log lines are written above the bar meanwhile.
    """

    def __init__(
        self, total: int, done: int, *, quiet: bool, stream: TextIO | None = None
    ) -> None:
        self.total, self.done = total, done
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = not quiet and self.stream.isatty()
        self._stack = ExitStack()

    def __enter__(self) -> StudyProgress:
        self.bar = self._stack.enter_context(
            tqdm(
                total=self.total,
                initial=self.done,
                desc="study",
                bar_format=BAR_FORMAT,
                file=self.stream,
                disable=not self.enabled,
                dynamic_ncols=True,
                leave=False,  # the per-trial lines and the results stay; the bar goes
            )
        )
        if self.enabled:
            self._stack.enter_context(logging_redirect_tqdm())
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if not self.enabled:
            return
        finished = finished_count(study)
        self.bar.update(max(0, finished - self.bar.n))
        best = best_value(study)
        if best is not None:
            self.bar.set_postfix_str(f"best {best:.1f} samples/s")
