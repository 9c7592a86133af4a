"""optuna-dashboard: the command that opens a study, and the note it shows beside it."""

from __future__ import annotations

import optuna


def command(storage: str) -> str:
    return f"optuna-dashboard {storage}"


def save_note(study: optuna.Study, body: str) -> None:
    """The study's note in optuna-dashboard (markdown)."""
    from optuna_dashboard import save_note as save  # an optional heavy import: the web app

    save(study, body)
