"""Errors that mean "the user asked for something impossible" (exit code 2, one line)."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input: the message names what is wrong and how to fix it, in one line."""
