"""The training process's torch threads (``main_threads``), a setting of each
``autotune.DataLoader`` that tunes it, and one count for the whole process: two loaders in
one loop (training and validation) each read with their own, set as each one's pass begins.
A count you set since a loader set one is left alone until a loader's setting changes, as
torch's loader leaves the process's threads alone. A loader collected puts back the count
the process had before loaders set one, where the count in place is still the one it set:
what runs after it (an evaluation, a loader made anew) has your threads."""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch

# what a loader set last, that loader (weakly: one gone sets nothing), and the process it
# set it in: a process forked since (a rank, a DataLoader worker) has a count of its own
_last_set: tuple[int, Any, int] | None = None
_yours: int | None = None  # the process's count before a loader set one over it
_refs: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # each loader's


def _set_here() -> tuple[int, Any] | None:
    """The count a loader set last in this process, and that loader's weak reference."""
    if _last_set is None or _last_set[2] != os.getpid():
        return None
    return _last_set[0], _last_set[1]


def yours() -> int:
    """The process's torch threads as you set them: where a loader's count is in place,
    the one it had before loaders set theirs."""
    current, last = torch.get_num_threads(), _set_here()
    if last is not None and current == last[0] and _yours is not None:
        return _yours
    return current


def apply(owner: object, wanted: int, *, changed: bool) -> None:
    """Sets torch's threads to ``wanted`` (``owner``'s, a loader's), where its setting
    ``changed`` or the count is still what another loader, alive, set: not yours."""
    global _last_set, _yours
    current = torch.get_num_threads()
    if wanted == current:
        return
    value, setter = _set_here() or (None, lambda: None)
    if changed or (current == value and setter() not in (None, owner)):
        _yours = yours()
        torch.set_num_threads(wanted)
        _last_set = (wanted, _ref(owner), os.getpid())


def _ref(owner: object) -> Any:
    """``owner``'s weak reference, made once, with what its collection puts back."""
    ref = _refs.get(owner)
    if ref is None:
        ref = _refs[owner] = weakref.ref(owner)
        weakref.finalize(owner, _gone, ref)
    return ref


def _gone(ref: Any) -> None:
    """A loader collected: where the count in place is the one it set last, yours back. Not
    in a process forked since (a DataLoader worker, a rank): its copy of the loader is not
    the one that set the count there, and OpenMP threads started in a fork can hang it."""
    global _last_set
    last = _set_here()
    if last is None or last[1] is not ref or _yours is None:
        return
    if torch.get_num_threads() == last[0]:
        torch.set_num_threads(_yours)
    _last_set = None
