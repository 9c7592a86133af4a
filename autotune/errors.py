"""Errors that mean "the user asked for something impossible" (exit code 2, one line)."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input: the message names what is wrong and how to fix it, in one line."""


def one_line(exc: BaseException) -> str:
    """An error's message on one line, for a message of its own (of an error raised in a
    DataLoader worker, the original's last line, not the traceback the loader adds)."""
    text = str(exc)
    if "Original Traceback" in text:
        text = text.strip().splitlines()[-1]
    return " ".join(text.split())
