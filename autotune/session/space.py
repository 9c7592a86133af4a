"""The search space: ``conf/search_space/*.yaml`` -> validated knobs -> Optuna suggestions.

Everything is checked before any trial runs: each knob on its own in ``knobs`` (unknown
knobs, ``low > high``, conditions on knobs that do not exist), then the space here (choices
this machine cannot run, dropped with a note; worker-only knobs without their condition).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import optuna

from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline.config import (
    AS_IS,
    INACTIVE,
    KNOBS,
    NEED_CUDA,
    PipelineConfig,
)
from autotune.pipeline.knob_table import BASELINE, NO_DEFAULT
from autotune.schema import SearchSpaceConfig
from autotune.session import decoder_choices, space_rules
from autotune.session.copy_fit import CopyFit
from autotune.session.knobs import Knob, build_knob, nearest_first
from autotune.session.read_wait import ReadWait
from autotune.session.space_rules import AS_IS_KEEPS

# What a Dataset of the user's own does not have: the tuner's decode and augmentation
IMAGE_PIPELINE = ("decoder", *AS_IS_KEEPS)
_UNSET = object()  # a knob neither a polish point nor its fill gives a value


def applies(knob: Knob, values: Mapping[str, Any]) -> bool:
    """Whether ``knob`` is tried at ``values`` (the knobs before it): its condition holds and
    it is not one of the pipeline choices the as-is pipeline keeps."""
    if knob.name in AS_IS_KEEPS and values.get("decoder") == AS_IS:
        return False
    return knob.when is None or (knob.when.knob in values and knob.when.holds(values))


@dataclass(frozen=True)
class SearchSpace:
    """Validated knobs in declaration order, plus notes on what this machine left out.

    Example:
        >>> space = SearchSpace.from_config(cfg.search_space, facts, device="cpu", batch_size=32)
        >>> space.suggest(optuna.trial.FixedTrial({"num_workers": 2, "prefetch_factor": 4}))
    """

    name: str
    knobs: tuple[Knob, ...]
    notes: tuple[str, ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()  # values of knobs the space does not mention

    @classmethod
    def from_config(
        cls,
        space_conf: SearchSpaceConfig,
        facts: MachineFacts,
        *,
        device: str,
        batch_size: int,
        own_dataset: bool = False,
        ranks: int = 1,
        read_wait: ReadWait | None = None,
        copy_fit: CopyFit | None = None,
    ) -> SearchSpace:
        """The space of ``space_conf`` on this machine; ``own_dataset``: the user's own Dataset,
        read as it is, for which only the DataLoader's arguments and threads are tuned;
        ``ranks``: processes that share the CPUs, each with its own loader (``cpus`` is a
        rank's share); ``read_wait``: where reads wait, ``num_workers`` up to ``cpus`` goes
        beyond the CPUs, as far as the waits ask; ``copy_fit``: the prepared copies (``cache``)
        left out here."""
        notes: list[str] = []
        cpus = facts.usable_cpus
        if ranks > 1:
            share = max(1, facts.usable_cpus // ranks)
            notes.append(
                f"{ranks} ranks share {facts.usable_cpus} usable CPUs: `cpus` (num_workers, "
                f"main_threads) is {share} per rank"
            )
            facts = dataclasses.replace(facts, usable_cpus=share)
        if own_dataset:
            space_conf = _without_image_pipeline(space_conf, notes)
        knobs: list[Knob] = []
        left_out: list[Knob] = []  # by `requires`: they keep their inactive value
        features = {"cuda": device == "cuda"}
        reads_wait = read_wait is not None and read_wait.waits
        for name, knob_conf in space_conf.knobs.items():
            knob = build_knob(name, knob_conf, facts, declared=[*knobs, *left_out])
            if name == "num_workers" and knob_conf.high == "cpus" and reads_wait:
                knob = dataclasses.replace(knob, high=max(1, read_wait.workers // ranks))
                notes.append(read_wait.note(cpus))
            # what the knob table says it needs, else what the space says
            needs = "cuda" if name in NEED_CUDA else knob_conf.requires
            if needs and not features[needs]:
                left_out.append(Knob(name, "fixed", value=INACTIVE[name]))
                continue
            if name == "cache" and copy_fit is not None:
                knob = copy_fit.narrowed(knob, notes)
            if name == "decoder":
                space_rules.check_decoder_first(knobs)
                knob = decoder_choices.offered(knob, cuda=features["cuda"], notes=notes)
            knobs.append(knob)
        if left_out:
            notes.append(
                f"{', '.join(k.name for k in left_out)} left out: "
                f"{'they need' if len(left_out) > 1 else 'it needs'} a CUDA device"
            )
        space_rules.check_worker_conditions(knobs)
        defaults = (("batch_size", batch_size), *((k.name, k.value) for k in left_out))
        if not any(k.name == "decoder" for k in knobs):  # no decoders named: the pipeline
            defaults = (*defaults, ("decoder", INACTIVE["decoder"]))  # as it is, tuned
        return cls(name=space_conf.name, knobs=tuple(knobs), notes=tuple(notes), defaults=defaults)

    def suggest(self, trial: optuna.Trial) -> PipelineConfig:
        """The trial's point of the space as a ``PipelineConfig``."""
        return self._config(lambda knob: knob.suggest(trial))

    def _config(self, value_of: Callable[[Knob], Any]) -> PipelineConfig:
        values: dict[str, Any] = dict(self.defaults)
        for knob in self.knobs:
            if applies(knob, values):
                values[knob.name] = value_of(knob)
            else:
                values[knob.name] = INACTIVE[knob.name]
        return PipelineConfig(**values)

    def baseline_params(self, *, default_threads: int) -> dict[str, Any]:
        """What users run, as trial params: their pipeline as it is (the tutorial's, for a
        folder) under PyTorch's defaults: 0 workers, no pinning, torch's threads."""
        wanted = {
            name: traits.torch_default
            for name, traits in KNOBS.items()
            if traits.torch_default not in (BASELINE, NO_DEFAULT)
        }
        wanted.update(
            decoder=AS_IS,
            main_threads=default_threads,
            batch_size=dict(self.defaults)["batch_size"],
        )
        values: dict[str, Any] = dict(self.defaults)
        params: dict[str, Any] = {}
        for knob in self.knobs:
            want = wanted.get(knob.name)
            if knob.type == "fixed":
                values[knob.name] = knob.value
            elif want is not None and applies(knob, values):
                options = knob.values()
                if want in options:
                    params[knob.name] = values[knob.name] = want
                elif knob.type == "int" or KNOBS[knob.name].torch_default == BASELINE:  # closest
                    params[knob.name] = values[knob.name] = min(
                        options, key=lambda v: abs(v - want)
                    )
                else:  # a list without PyTorch's default: the baseline is not in the space
                    where = f"search_space.knobs.{knob.name}.choices"
                    raise UsageError(f"{where} must include {want!r}, the baseline's (PyTorch's)")
        return params

    def grid(self) -> list[dict[str, Any]]:
        """Every point of the space as trial params, each conditional knob only where its
        condition holds, and one point per config (on a decoded copy every decoder is one
        config). For exhaustive baselines."""
        fixed = {k.name: k.value for k in self.knobs if k.type == "fixed"}
        points: list[dict[str, Any]] = [{}]
        for knob in self.knobs:
            if knob.type == "fixed":
                continue
            grown = []
            for point in points:
                values = {**dict(self.defaults), **fixed, **point}
                if not applies(knob, values):
                    grown.append(point)
                else:
                    grown += [{**point, knob.name: value} for value in knob.values()]
            points = grown
        configs = {}  # the first point of each config (what suggest makes of it), in order
        for point in points:
            configs.setdefault(self.config_at(point), point)
        return list(configs.values())

    def config_at(self, values: Mapping[str, Any]) -> PipelineConfig:
        """The config at ``values`` (where their conditions hold), other knobs at their first."""
        return self._config(lambda knob: values.get(knob.name, knob.values()[0]))

    def params_of(self, config: PipelineConfig) -> dict[str, Any] | None:
        """``config`` as this space's trial params (what ``suggest`` turns back into it);
        None where it is not a point of this space."""
        values: dict[str, Any] = dict(self.defaults)
        params: dict[str, Any] = {}
        for knob in self.knobs:
            value = getattr(config, knob.name)
            if knob.type != "fixed" and applies(knob, values):
                if value not in knob.values():
                    return None
                params[knob.name] = value
            values[knob.name] = value
        same = self._config(lambda knob: params.get(knob.name, knob.value)) == config
        return params if same else None

    def distributions(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The Optuna distributions of ``params``' knobs, as ``suggest`` would record them."""
        return {k.name: k.distribution() for k in self.knobs if k.name in params}

    def choices(self, name: str) -> list[Any]:
        """Every value the knob ``name`` takes here; [] where the space has no such knob."""
        knob = next((k for k in self.knobs if k.name == name), None)
        return knob.values() if knob is not None else []

    def neighbours(
        self, params: Mapping[str, Any], fill: Mapping[str, Any] | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """The points one knob away from ``params``, one list per knob, by its name (in
        declaration order), nearest changes first within each: one more worker, then one
        fewer... A knob the step brings into play (prefetch_factor when workers start) takes
        its value from ``fill``, where it has one.

        Used to polish the search's best: TPE samples broadly, but on a small discrete space it
        can miss the one-step improvement next to its best (one more worker, one thread fewer).
        """
        fill = fill or {}
        per_knob: dict[str, list[dict[str, Any]]] = {}
        for knob in self.knobs:
            if knob.type == "fixed" or knob.name not in params:
                continue
            current = params[knob.name]
            if knob.type == "int":
                options = knob.values()
                steps = [current + knob.step, current - knob.step, current * 2, current // 2]
                candidates = [v for v in steps if v in options and v != current]
            else:
                candidates = nearest_first(knob.values(), current)
            points = []
            for value in dict.fromkeys(candidates):  # ordered, unique
                points.append(self._completed({**params, knob.name: value}, fill))
            per_knob[knob.name] = points
        return per_knob

    def _completed(self, point: Mapping[str, Any], fill: Mapping[str, Any]) -> dict[str, Any]:
        """``point`` without the knobs whose condition no longer holds (Optuna leaves them
        out too), and with those it brings into play set from ``fill``: unset, a step to one
        worker would be "tried" by any one-worker trial, however it set persistent_workers."""
        names = {knob.name for knob in self.knobs}
        completed = {k: v for k, v in point.items() if k not in names}
        for knob in self.knobs:  # in declaration order: a condition names earlier knobs
            value = point.get(knob.name, fill.get(knob.name, _UNSET))
            if value is not _UNSET and applies(knob, completed):
                completed[knob.name] = value
        return completed

    def fingerprint(self) -> str:
        payload = json.dumps([asdict(k) for k in self.knobs], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _without_image_pipeline(space_conf: SearchSpaceConfig, notes: list[str]) -> SearchSpaceConfig:
    """The space for a Dataset of the user's own: the image-pipeline knobs left out, noted
    once (with no decoder knob, every trial is as it is)."""
    dropped = [name for name in space_conf.knobs if name in IMAGE_PIPELINE]
    if dropped:
        notes.append(
            f"{', '.join(dropped)} left out: your own Dataset is read as it is (only the "
            "DataLoader's arguments and threads are tuned)"
        )
    kept = {name: knob for name, knob in space_conf.knobs.items() if name not in IMAGE_PIPELINE}
    return dataclasses.replace(space_conf, knobs=kept)
