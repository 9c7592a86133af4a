"""The knobs of a search space: each one's kind and range, the condition that turns it on,
and the checks that build it from ``conf/search_space/*.yaml``.

Example:
    >>> knob = build_knob("prefetch_factor", cfg, facts, declared=[workers])
    >>> knob.values(), str(knob.when)   # [2, 3, 4], 'num_workers > 0'
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline.config import INACTIVE, KNOBS
from autotune.schema import KnobConfig

# the values a choice knob may list, where they are a closed set (the knob table's)
KNOWN_VALUES = {n: t.values for n, t in KNOBS.items() if t.values is not None and t.searched}
FEATURES = ("cuda",)
TYPES = ("int", "choice", "bool", "fixed")
_OPS = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
_CONDITION = re.compile(r"^\s*(\w+)\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Condition:
    """``knob op value``, e.g. ``num_workers > 0``."""

    knob: str
    op: str
    value: Any

    @classmethod
    def parse(cls, text: str, where: str) -> Condition:
        match = _CONDITION.match(text)
        if not match:
            raise UsageError(
                f"{where}.when={text!r} is not a condition: write it as 'knob op value', "
                "e.g. 'num_workers > 0'"
            )
        knob, op, raw = match.groups()
        try:
            value = json.loads(raw) if re.match(r"^-?[\d.]+$|^true$|^false$", raw) else raw
        except json.JSONDecodeError:
            raise UsageError(f"{where}.when={text!r}: {raw!r} is not a number") from None
        return cls(knob, op, value)

    def holds(self, values: Mapping[str, Any]) -> bool:
        return bool(_OPS[self.op](values[self.knob], self.value))

    def __str__(self) -> str:
        return f"{self.knob} {self.op} {self.value}"


@dataclass(frozen=True)
class Knob:
    name: str
    type: str
    low: int | None = None
    high: int | None = None
    step: int = 1
    log: bool = False
    choices: tuple[Any, ...] = ()
    value: Any = None
    when: Condition | None = None

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.type == "fixed":
            return self.value
        if self.type == "int":
            assert self.low is not None and self.high is not None
            return trial.suggest_int(self.name, self.low, self.high, step=self.step, log=self.log)
        if self.type == "bool":
            return trial.suggest_categorical(self.name, [False, True])
        return trial.suggest_categorical(self.name, list(self.choices))

    def distribution(self) -> optuna.distributions.BaseDistribution:
        """What ``suggest`` draws from: a trial of a point measured unasked is recorded with
        it (``optuna.trial.create_trial``)."""
        if self.type == "int":
            assert self.low is not None and self.high is not None
            return optuna.distributions.IntDistribution(
                self.low, self.high, step=self.step, log=self.log
            )
        choices = [False, True] if self.type == "bool" else list(self.choices)
        return optuna.distributions.CategoricalDistribution(choices)

    def values(self) -> list[Any]:
        """Every value this knob can take (for grids and baselines)."""
        if self.type == "fixed":
            return [self.value]
        if self.type == "bool":
            return [False, True]
        if self.type == "choice":
            return list(self.choices)
        assert self.low is not None and self.high is not None
        return list(range(self.low, self.high + 1, self.step))


def build_knob(
    name: str, knob_conf: KnobConfig, facts: MachineFacts, declared: list[Knob]
) -> Knob:
    """The knob ``name`` of the config, checked; ``declared``: the knobs before it, which
    its condition may refer to."""
    where = f"search_space.knobs.{name}"
    if name not in INACTIVE:
        raise UsageError(
            f"unknown knob {name!r} in the search space; known: {', '.join(INACTIVE)}"
        )
    if knob_conf.type not in TYPES:
        raise UsageError(f"{where}.type must be one of {', '.join(TYPES)}, got {knob_conf.type!r}")
    if knob_conf.requires is not None and knob_conf.requires not in FEATURES:
        raise UsageError(f"{where}.requires must be one of {FEATURES}, got {knob_conf.requires!r}")
    if knob_conf.choices is not None and knob_conf.type != "choice":
        raise UsageError(  # else the choices would be left unused, silently
            f"{where}.choices is set but its type is {knob_conf.type}: add {where}.type=choice"
        )
    when = _condition(knob_conf.when, where, declared) if knob_conf.when else None
    if knob_conf.type == "fixed":
        if knob_conf.value is None and name not in ("prefetch_factor", "main_threads"):
            raise UsageError(f"{where}.value must be set for a fixed knob")  # None: torch's
        known = KNOWN_VALUES.get(name)
        if known is not None and knob_conf.value not in known:
            raise UsageError(
                f"{where}.value {knob_conf.value!r} is unknown; known: {', '.join(known)}"
            )
        return Knob(name, "fixed", value=knob_conf.value, when=when)
    if knob_conf.type == "bool":
        return Knob(name, "bool", when=when)
    if knob_conf.type == "choice":
        return Knob(name, "choice", choices=_choices(name, knob_conf, where), when=when)
    low, high = _int_range(knob_conf, facts, where)
    return Knob(name, "int", low=low, high=high, step=knob_conf.step, log=knob_conf.log, when=when)


def _condition(text: str, where: str, declared: list[Knob]) -> Condition:
    """The knob's ``when``, on a knob declared before it and comparable with its values."""
    when = Condition.parse(text, where)
    ref = next((k for k in declared if k.name == when.knob), None)
    if ref is None:
        raise UsageError(
            f"{where}.when refers to {when.knob!r}, which is not a knob declared before it"
        )
    try:
        for v in ref.values():
            when.holds({when.knob: v})
    except TypeError:
        raise UsageError(
            f"{where}.when={text!r}: {when.value!r} cannot be compared with "
            f"the values of {when.knob} ({ref.values()[:4]}...)"
        ) from None
    return when


def _choices(name: str, knob_conf: KnobConfig, where: str) -> tuple[Any, ...]:
    choices = tuple(knob_conf.choices or ())
    if not choices:
        raise UsageError(f"{where}.choices must list at least one value")
    known = KNOWN_VALUES.get(name)
    unknown = sorted(set(choices) - set(known or choices), key=str)
    if unknown:
        raise UsageError(
            f"{where}.choices has unknown values {unknown}; known: {', '.join(known)}"
        )
    return choices


def _int_range(knob_conf: KnobConfig, facts: MachineFacts, where: str) -> tuple[int, int]:
    low = _resolve_bound(knob_conf.low, facts, f"{where}.low")
    high = _resolve_bound(knob_conf.high, facts, f"{where}.high")
    if low > high:
        raise UsageError(f"{where}: `low <= high` must hold, but got ({low=}, {high=})")
    if knob_conf.log and low < 1:
        raise UsageError(f"{where}: a log range needs low >= 1, got {low=}")
    if knob_conf.step < 1:
        raise UsageError(f"{where}.step must be >= 1, got {knob_conf.step}")
    if knob_conf.log and knob_conf.step != 1:
        raise UsageError(f"{where}: a log range cannot have a step (got step={knob_conf.step})")
    return low, high


def _resolve_bound(value: Any, facts: MachineFacts, where: str) -> int:
    if value == "cpus":
        return facts.usable_cpus
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where} must be an integer or 'cpus' (usable CPUs), got {value!r}")
    return value


def nearest_first(values: list[Any], current: Any) -> list[Any]:
    """The other values, nearest first where they are numbers (worker counts listed as
    choices: 8 and 2 around 4 before 32 and 0); else in their order."""
    others = [v for v in values if v != current]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if not numbers or current not in values:
        return others
    ordered = sorted(values)
    at = ordered.index(current)
    return sorted(others, key=lambda v: (abs(ordered.index(v) - at), -v))
