"""The training process's torch threads (``main_threads``), a setting of each
``autotune.DataLoader`` that tunes it, and one count for the whole process: two loaders in
one loop (training and validation) each read with their own, set as each one's pass begins.
A count you set since a loader set one is left alone until a loader's setting changes, as
torch's loader leaves the process's threads alone."""

from __future__ import annotations

import torch

_last_set: int | None = None  # what a loader set last, in this process


def apply(wanted: int, *, changed: bool) -> None:
    """Sets torch's threads to ``wanted`` (a loader's), where its setting ``changed`` or the
    count is still what a loader set (another loader's, say), not yours."""
    global _last_set
    current = torch.get_num_threads()
    if wanted != current and (changed or current == _last_set):
        torch.set_num_threads(wanted)
        _last_set = wanted
