"""The winner's one-setting variants: each setting it tuned put back to what PyTorch does by
default (a switch it left off turned on), and other decoders swapped in, in the order they
are worth measuring."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.pipeline import decoders
from autotune.pipeline.config import AS_IS, KNOBS, PipelineConfig
from autotune.pipeline.knob_table import BASELINE, NO_DEFAULT
from autotune.tuner import store
from autotune.tuner.metrics import feasible_complete

# what PyTorch does by default for each setting the tuner may choose (None: what the
# baseline runs), in the order they are measured after the best other decoder when the
# budget allows only some: the ones folklore argues about first (the knob table's ranks)
PYTORCH_DEFAULTS: dict[str, Any] = {
    name: None if traits.torch_default is BASELINE else traits.torch_default
    for name, traits in sorted(KNOBS.items(), key=lambda item: item[1].worth_rank)
    if traits.torch_default is not NO_DEFAULT
}


@dataclass(frozen=True)
class Variant:
    """The winner with one setting changed (and what that change implies: no workers, no
    prefetch factor; a device decoder, augmentation on the device)."""

    knob: str
    value: Any  # what the setting is put back to (or the decoder swapped for)
    config: PipelineConfig
    also_changed: tuple[str, ...] = ()  # the settings the change implies, beside the knob

    @property
    def label(self) -> str:
        return f"{self.knob}={self.value}"


def variants(
    winner: PipelineConfig,
    baseline: PipelineConfig,
    *,
    tuned: list[str],
    decoders_ranked: list[str],
) -> list[Variant]:
    """The winner with each ``tuned`` setting that differs from PyTorch's default put back to
    it, and with each decoder of ``decoders_ranked`` (best first) swapped in: the best other
    decoder first, then the settings, then the other decoders; one that would be the winner
    again, or another variant again, left out. A switch the winner leaves at PyTorch's
    default (``persistent_workers``, ``pin_memory``, ...) is turned on instead: folklore says
    "always", and the row says what it is worth here; so is one main thread beside workers,
    for a winner at torch's own thread count. DALI replaces the DataLoader: it is
    not swapped in or out (its loader settings are not the DataLoader's)."""
    out: list[Variant] = []
    seen = {winner}

    def add(knob: str, value: Any, config: PipelineConfig) -> None:
        if config not in seen:
            seen.add(config)
            implied = tuple(sorted(_differing(winner, config) - {knob}))
            out.append(Variant(knob, value, config, implied))

    swaps = [] if winner.replaces_loader else [d for d in decoders_ranked if not _own_loader(d)]
    for name in swaps[:1]:
        add("decoder", name, _with(winner, decoder=name))
    for knob, default in PYTORCH_DEFAULTS.items():
        if knob not in tuned:
            continue  # fixed by the space (or by this machine): not the tuner's choice
        if default is None and knob != "prefetch_factor":
            default = getattr(baseline, knob)
        if knob == "prefetch_factor":
            if winner.num_workers and (winner.prefetch_factor or 2) != 2:
                add(knob, 2, _with(winner, prefetch_factor=None))
        elif getattr(winner, knob) != default and default is not None:
            add(knob, default, _with(winner, **{knob: default}))
        elif default is False and _switchable(winner, knob):
            add(knob, True, _with(winner, **{knob: True}))
        elif knob == "main_threads" and winner.num_workers and (winner.main_threads or 1) > 1:
            # torch's own count beside workers: folklore says one thread, leaving the
            # workers the cores; the row says what that is worth here
            add(knob, 1, _with(winner, main_threads=1))
    for name in swaps[1:]:
        add("decoder", name, _with(winner, decoder=name))
    return out


def _switchable(winner: PipelineConfig, knob: str) -> bool:
    """Whether turning ``knob`` on is a config of its own: persistence needs workers; a
    switch the pipeline as it is keeps off (device prefetch, channels-last) stays off."""
    if knob == "persistent_workers":
        return winner.num_workers > 0 and not winner.replaces_loader
    return knob == "pin_memory" or not winner.as_is


def _differing(a: PipelineConfig, b: PipelineConfig) -> set[str]:
    return {f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}


def decoders_ranked(study: optuna.Study, winner: PipelineConfig, choices: list[str]) -> list[str]:
    """The other decoders, the one to measure first first: for a winner that decodes at
    reduced size, full decodes first (what reducing is worth); then by their best trial in
    the search; the pipeline as it is last."""
    best: dict[str, float] = {}
    for t in feasible_complete(study):
        name = store.pipeline_of(t).decoder
        best[name] = max(best.get(name, 0.0), t.value or 0.0)
    reducing = reduces(winner.decoder)
    others = [d for d in choices if d != winner.decoder]
    return sorted(others, key=lambda d: (d == AS_IS, reducing and reduces(d), -best.get(d, 0.0)))


def _own_loader(decoder: str) -> bool:
    found = decoders.DECODERS.get(decoder)
    return bool(found and found.replaces_loader)


def reduces(decoder: str) -> bool:
    found = decoders.DECODERS.get(decoder)
    return bool(found and found.can_reduce)


def _with(config: PipelineConfig, **changes: Any) -> PipelineConfig:
    """``config`` with ``changes``; no workers: none of the settings that need them either."""
    if changes.get("num_workers") == 0:
        return config.without_workers(**changes)
    return dataclasses.replace(config, **changes)
