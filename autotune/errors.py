"""Errors that mean "the user asked for something impossible" (exit code 2, one line)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class UsageError(ValueError):
    """Bad input: the message names what is wrong and how to fix it, in one line."""


def one_line(exc: BaseException) -> str:
    """An error's message on one line, for a message of its own (of an error raised in a
    DataLoader worker, the original's last line, not the traceback the loader adds)."""
    text = str(exc)
    if "Original Traceback" in text:
        text = text.strip().splitlines()[-1]
    return " ".join(text.split())


def imported(target: str, key: str, fix: str, get: Callable[[str], Any]) -> Any:
    """``get(target)`` (Hydra's ``get_class``, ``get_method`` or ``get_object``); a target
    that cannot be imported is one line: ``key=target cannot be imported (why): fix``."""
    try:
        return get(target)
    except Exception as exc:  # noqa: BLE001 - Hydra raises ImportError or ValueError
        raise UsageError(
            f"{key}={target} cannot be imported ({one_line(exc.__cause__ or exc)}): {fix}"
        ) from None
