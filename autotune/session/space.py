"""The search space: ``conf/search_space/*.yaml`` -> validated knobs -> Optuna suggestions.

Everything is checked here, before any trial runs: unknown knobs, ``low > high``, conditions
on knobs that do not exist, choices this machine cannot run (dropped with a note).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import optuna

from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline import decoders
from autotune.pipeline.config import PipelineConfig
from autotune.schema import KnobConfig, SearchSpaceConfig

# Every knob and the value it takes when its condition does not hold.
INACTIVE = {
    "batch_size": None,  # always active
    "num_workers": 0,
    "prefetch_factor": None,
    "persistent_workers": False,
    "pin_memory": False,
    "decoder": "pil",
    "main_threads": None,
    "augment_on": "cpu",
    "transfer": "uint8",
    "device_prefetch": False,
    "channels_last": False,
    "dali_num_threads": None,
    "dali_prefetch_queue_depth": None,
}
# DataLoader refuses these with num_workers=0: the space must say `when: "num_workers > 0"`.
NEED_WORKERS = ("prefetch_factor", "persistent_workers")
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


@dataclass(frozen=True)
class SearchSpace:
    """Validated knobs in declaration order, plus notes on what this machine left out.

    Example:
        >>> space = SearchSpace.from_config(cfg.search_space, facts, device="cpu")
        >>> space.suggest(optuna.trial.FixedTrial({"num_workers": 2, "prefetch_factor": 4}))
    """

    name: str
    knobs: tuple[Knob, ...]
    notes: tuple[str, ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()  # values of knobs the space does not mention

    @classmethod
    def from_config(
        cls,
        cfg: SearchSpaceConfig,
        facts: MachineFacts,
        *,
        device: str,
        batch_size: int,
    ) -> SearchSpace:
        notes: list[str] = []
        knobs: list[Knob] = []
        left_out: list[Knob] = []  # by `requires`: they keep their inactive value
        features = {"cuda": device == "cuda"}
        for name, knob_cfg in cfg.knobs.items():
            knob = _build_knob(name, knob_cfg, facts, declared=[*knobs, *left_out])
            if knob_cfg.requires and not features[knob_cfg.requires]:
                left_out.append(Knob(name, "fixed", value=INACTIVE[name]))
                continue
            if name == "decoder" and knob.type == "fixed":
                reason = decoders.DECODERS[knob.value].unavailable_reason()
                if reason:
                    raise UsageError(f"search_space.knobs.decoder: {knob.value} {reason}")
            elif name == "decoder":
                dropped = _unusable_decoders(knob.choices, cuda=features["cuda"])
                kept = tuple(c for c in knob.choices if c not in dropped)
                # one line per reason: "decoders nvjpeg, dali left out: it needs a CUDA device"
                for reason in dict.fromkeys(dropped.values()):
                    names = [n for n, r in dropped.items() if r == reason]
                    plural = "decoders" if len(names) > 1 else "decoder"
                    notes.append(f"{plural} {', '.join(names)} left out: {reason}")
                if not kept:
                    raise UsageError(
                        "search_space: no decoder of the list can run on this machine"
                    )
                knob = dataclasses.replace(knob, choices=kept)
            knobs.append(knob)
        if left_out:
            notes.append(
                f"{', '.join(k.name for k in left_out)} left out: they need a CUDA device"
            )
        _check_worker_conditions(knobs)
        defaults = (("batch_size", batch_size), *((k.name, k.value) for k in left_out))
        return cls(name=cfg.name, knobs=tuple(knobs), notes=tuple(notes), defaults=defaults)

    def suggest(self, trial: optuna.Trial) -> PipelineConfig:
        """The trial's point of the space as a ``PipelineConfig``."""
        values: dict[str, Any] = dict(self.defaults)
        for knob in self.knobs:
            if knob.when is not None and not knob.when.holds(values):
                values[knob.name] = INACTIVE[knob.name]
            else:
                values[knob.name] = knob.suggest(trial)
        return PipelineConfig(**values)

    def baseline_params(self, *, default_threads: int) -> dict[str, Any]:
        """PyTorch's defaults as trial params: 0 workers, no pinning, Pillow, torch's threads,
        and the tutorial pipeline: augment and normalize in the workers, float32 to the
        device, no side-stream copies, NCHW."""
        wanted = {
            "num_workers": 0,
            "pin_memory": False,
            "decoder": "pil",
            "main_threads": default_threads,
            "augment_on": "cpu",
            "transfer": "float",
            "device_prefetch": False,
            "channels_last": False,
            "batch_size": dict(self.defaults)["batch_size"],
        }
        params = {}
        for knob in self.knobs:
            if knob.type == "fixed" or knob.name not in wanted:
                continue
            options = knob.values()
            if wanted[knob.name] in options:
                params[knob.name] = wanted[knob.name]
            elif knob.type == "int":  # closest in range, e.g. threads capped by the space
                params[knob.name] = min(options, key=lambda v: abs(v - wanted[knob.name]))
        return params

    def grid(self) -> list[dict[str, Any]]:
        """Every point of the space as trial params, each conditional knob only where its
        condition holds (so no two points are the same config). For exhaustive baselines."""
        fixed = {k.name: k.value for k in self.knobs if k.type == "fixed"}
        points: list[dict[str, Any]] = [{}]
        for knob in self.knobs:
            if knob.type == "fixed":
                continue
            grown = []
            for point in points:
                values = {**dict(self.defaults), **fixed, **point}
                if knob.when is not None and not knob.when.holds(values):
                    grown.append(point)
                else:
                    grown += [{**point, knob.name: value} for value in knob.values()]
            points = grown
        return points

    def neighbours(self, params: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
        """The points one knob away from ``params``, one list per knob (in declaration
        order), nearest changes first within each: one more worker, then one fewer...

        Used to polish the search's best: TPE samples broadly, but on a small discrete space it
        can miss the one-step improvement next to its best (one more worker, one thread fewer).
        """
        per_knob: list[list[dict[str, Any]]] = []
        for knob in self.knobs:
            if knob.type == "fixed" or knob.name not in params:
                continue
            current = params[knob.name]
            if knob.type == "int":
                options = knob.values()
                steps = [current + knob.step, current - knob.step, current * 2, current // 2]
                candidates = [v for v in steps if v in options and v != current]
            else:
                candidates = [v for v in knob.values() if v != current]
            points = []
            for value in dict.fromkeys(candidates):  # ordered, unique
                point = {**params, knob.name: value}
                # drop knobs whose condition no longer holds: Optuna leaves them out too
                points.append({k: v for k, v in point.items() if self._active(k, point)})
            per_knob.append(points)
        return per_knob

    def _active(self, name: str, values: Mapping[str, Any]) -> bool:
        knob = next((k for k in self.knobs if k.name == name), None)
        if knob is None or knob.when is None:
            return True
        return knob.when.knob in values and knob.when.holds(values)

    def fingerprint(self) -> str:
        payload = json.dumps([asdict(k) for k in self.knobs], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _unusable_decoders(choices: tuple[Any, ...], *, cuda: bool) -> dict[str, str]:
    """The decoders of ``choices`` that cannot run here, with the reason."""
    out = {}
    for name in choices:
        reason = decoders.DECODERS[name].unavailable_reason()
        if reason is None and decoders.DECODERS[name].on_device and not cuda:
            reason = "it needs device=cuda"
        if reason is not None:
            out[name] = reason
    return out


def _resolve_bound(value: Any, facts: MachineFacts, where: str) -> int:
    if value == "cpus":
        return facts.usable_cpus
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where} must be an integer or 'cpus' (usable CPUs), got {value!r}")
    return value


def _build_knob(name: str, cfg: KnobConfig, facts: MachineFacts, declared: list[Knob]) -> Knob:
    where = f"search_space.knobs.{name}"
    if name not in INACTIVE:
        raise UsageError(
            f"unknown knob {name!r} in the search space; known: {', '.join(INACTIVE)}"
        )
    if cfg.type not in TYPES:
        raise UsageError(f"{where}.type must be one of {', '.join(TYPES)}, got {cfg.type!r}")
    if cfg.requires is not None and cfg.requires not in FEATURES:
        raise UsageError(f"{where}.requires must be one of {FEATURES}, got {cfg.requires!r}")
    when = Condition.parse(cfg.when, where) if cfg.when else None
    if when is not None:
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
                f"{where}.when={cfg.when!r}: {when.value!r} cannot be compared with "
                f"the values of {when.knob} ({ref.values()[:4]}...)"
            ) from None
    if cfg.type == "fixed":
        if cfg.value is None and name not in ("prefetch_factor", "main_threads"):
            raise UsageError(f"{where}.value must be set for a fixed knob")  # None: torch's
        if name == "decoder" and cfg.value not in decoders.DECODERS:
            raise UsageError(
                f"{where}.value {cfg.value!r} is not a decoder; known: "
                f"{', '.join(decoders.DECODERS)}"
            )
        return Knob(name, "fixed", value=cfg.value, when=when)
    if cfg.type == "bool":
        return Knob(name, "bool", when=when)
    if cfg.type == "choice":
        choices = tuple(cfg.choices or ())
        if not choices:
            raise UsageError(f"{where}.choices must list at least one value")
        if name == "decoder":
            unknown = sorted(set(choices) - set(decoders.DECODERS))
            if unknown:
                raise UsageError(
                    f"{where}.choices has unknown decoders {unknown}; known: "
                    f"{', '.join(decoders.DECODERS)}"
                )
        return Knob(name, "choice", choices=choices, when=when)
    low = _resolve_bound(cfg.low, facts, f"{where}.low")
    high = _resolve_bound(cfg.high, facts, f"{where}.high")
    if low > high:
        raise UsageError(f"{where}: `low <= high` must hold, but got ({low=}, {high=})")
    if cfg.log and low < 1:
        raise UsageError(f"{where}: a log range needs low >= 1, got {low=}")
    if cfg.step < 1:
        raise UsageError(f"{where}.step must be >= 1, got {cfg.step}")
    if cfg.log and cfg.step != 1:
        raise UsageError(f"{where}: a log range cannot have a step (got step={cfg.step})")
    return Knob(name, "int", low=low, high=high, step=cfg.step, log=cfg.log, when=when)


def _check_worker_conditions(knobs: list[Knob]) -> None:
    by_name = {k.name: k for k in knobs}
    workers = by_name.get("num_workers")
    zero_workers_possible = workers is None or 0 in workers.values()
    for name in NEED_WORKERS:
        knob = by_name.get(name)
        if knob is None or not zero_workers_possible:
            continue
        if (
            knob.when is None
            or knob.when.knob != "num_workers"
            or knob.when.holds({"num_workers": 0})
        ):
            raise UsageError(
                f'search_space.knobs.{name} needs num_workers > 0: add when: "num_workers > 0"'
            )
