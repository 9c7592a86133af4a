"""The progress bar over a study's trials."""

from __future__ import annotations

import io

import optuna
import pytest

from autotune.tuner.progress import StudyProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stream", "quiet", "drawn"),
    [(Terminal, False, True), (Terminal, True, False), (io.StringIO, False, False)],
)
def test_the_study_bar_is_drawn_on_a_terminal_only_and_never_when_quiet(stream, quiet, drawn):
    study = optuna.create_study(direction="maximize")
    out = stream()
    with StudyProgress(3, 0, quiet=quiet, stream=out) as progress:
        study.optimize(lambda t: 100.0 * (t.number + 1), n_trials=3, callbacks=[progress])
    text = out.getvalue()
    assert ("3/3 trials" in text and "best 300.0 samples/s" in text) == drawn
    assert text == "" or drawn  # piped or quiet: not a character
