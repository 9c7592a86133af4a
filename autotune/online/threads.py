"""The training process's torch threads (``main_threads``), a setting of each
``autotune.DataLoader`` that tunes it, and one count for the whole process: two loaders in
one loop (training and validation) each read with their own, set as each one's pass begins.
A count you set since a loader set one is left alone until a loader's setting changes, as
torch's loader leaves the process's threads alone."""

from __future__ import annotations

import weakref
from typing import Any

import torch

# what a loader set last in this process, and that loader (weakly: one gone sets nothing)
_last_set: tuple[int, Any] | None = None


def apply(owner: object, wanted: int, *, changed: bool) -> None:
    """Sets torch's threads to ``wanted`` (``owner``'s, a loader's), where its setting
    ``changed`` or the count is still what another loader, alive, set: not yours."""
    global _last_set
    current = torch.get_num_threads()
    if wanted == current:
        return
    value, setter = _last_set or (None, lambda: None)
    if changed or (current == value and setter() not in (None, owner)):
        torch.set_num_threads(wanted)
        _last_set = (wanted, weakref.ref(owner))
