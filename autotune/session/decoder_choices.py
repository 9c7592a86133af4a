"""The decoder knob on this machine: ``as_is`` always among its values, and without the
decoders this machine cannot run, each reason noted once."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.errors import UsageError
from autotune.pipeline import decoders
from autotune.pipeline.config import AS_IS
from autotune.session.knobs import Knob


def offered(knob: Knob, *, cuda: bool, notes: list[str]) -> Knob:
    """The decoder knob as the search offers it here; what was added or left out noted."""
    return _usable(_with_as_is(knob, notes), cuda, notes)


def _with_as_is(knob: Knob, notes: list[str]) -> Knob:
    """The decoder knob with ``as_is`` among its values: the baseline and the loader_kwargs a
    best.yaml hands back are the user's pipeline as it is."""
    values = knob.values()
    if AS_IS in values:
        return knob
    notes.append(f"decoder {AS_IS} added: the baseline is your pipeline as it is")
    return dataclasses.replace(knob, type="choice", choices=(AS_IS, *values), value=None)


def _usable(knob: Knob, cuda: bool, notes: list[str]) -> Knob:
    """The decoder knob without the decoders this machine cannot run, each reason noted once
    ("decoders nvjpeg, dali left out: it needs device=cuda"); none left of the listed ones
    is an error."""
    if knob.type == "fixed":  # as it is, alone: nothing of the tuner's to run
        return knob
    dropped = _unusable(knob.choices, cuda=cuda)
    for reason in dict.fromkeys(dropped.values()):
        names = [n for n, r in dropped.items() if r == reason]
        plural = "decoders" if len(names) > 1 else "decoder"
        notes.append(f"{plural} {', '.join(names)} left out: {reason}")
    kept = tuple(c for c in knob.choices if c not in dropped)
    if kept == (AS_IS,) and dropped:
        reasons = "; ".join(f"{n} {r}" for n, r in dropped.items())
        raise UsageError(
            f"search_space.knobs.decoder: no decoder of the list can run here ({reasons})"
        )
    return dataclasses.replace(knob, choices=kept)


def _unusable(choices: tuple[Any, ...], *, cuda: bool) -> dict[str, str]:
    """The decoders of ``choices`` that cannot run here, with the reason."""
    out = {}
    for name in choices:
        if name == AS_IS:
            continue
        reason = decoders.DECODERS[name].unavailable_reason()
        if reason is None and decoders.DECODERS[name].on_device and not cuda:
            reason = "it needs device=cuda"
        if reason is not None:
            out[name] = reason
    return out
