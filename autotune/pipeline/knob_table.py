"""The knob table's vocabulary: the traits each setting the tuner chooses declares once, on its
``PipelineConfig`` field (``pipeline/config.py``), and everything read from them.

Every list that names knobs — the DataLoader's arguments, what a search space may name and the
value it takes when its condition does not hold, what PyTorch does by default (the worth
table's rows), the worker-only and CUDA-only knobs, what the pipeline "as it is" keeps, the
labels of progress lines — derives from these traits; none is written out by hand.

Example:
    >>> from autotune.pipeline.config import KNOBS
    >>> KNOBS["prefetch_factor"].needs_workers, KNOBS["pin_memory"].layer
    (True, <Layer.LOADER: 'DataLoader argument'>)
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Layer(enum.Enum):
    """Where a setting acts."""

    LOADER = "DataLoader argument"  # best.yaml's `loader:`; what loader_kwargs() returns
    MAIN = "training process"  # the process that runs the step (its torch threads)
    PIPELINE = "pipeline"  # the tuner's decode, copy and augmentation (best.yaml's `pipeline:`)
    DEVICE = "device"  # what crosses the bus and how the device receives it


class _Marker:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


# ``torch_default``: the setting is not put back to a default in the worth table (a decoder
# is swapped instead; a setting only DALI has has no PyTorch default)
NO_DEFAULT: Any = _Marker("NO_DEFAULT")
# ``torch_default``: what the baseline runs (the study's batch size, torch's own thread count)
BASELINE: Any = _Marker("BASELINE")
# ``as_is``: the pipeline as it is tunes this setting too (it is one of the loader's settings
# or the training process's); any other value is what the pipeline as it is holds it at
TUNED: Any = _Marker("TUNED")
# ``inactive``: the field's own default
FIELD_DEFAULT: Any = _Marker("FIELD_DEFAULT")

Label = Callable[[Any], "str | None"]  # the config -> its part of a progress line, or None


@dataclass(frozen=True)
class KnobTraits:
    """What the tuner must know of one setting; declared on its ``PipelineConfig`` field.

    Attributes:
        layer: where it acts; ``Layer.LOADER`` settings are the DataLoader's arguments.
        torch_default: what PyTorch does when the user does not set it: the value the worth
            table puts the winner's setting back to (or ``BASELINE``, ``NO_DEFAULT``).
        worth_rank: the order of the worth table's rows when its budget allows only some
            (lowest first): the settings folklore argues about first.
        inactive: the value it takes where its search-space condition does not hold.
        needs_workers: only meaningful with ``num_workers > 0``; a search space must say
            ``when: "num_workers > 0"``, and a config without workers holds ``inactive``.
        needs_cuda: only tried on a CUDA device (left out of the space elsewhere).
        as_is: ``TUNED``, or the value the user's pipeline as it is holds it at.
        replaced_by_loader: DataLoader machinery a decoder that replaces the loader (DALI)
            brings its own of: with it, the setting holds ``inactive``.
        own_loader_default: for a setting only a decoder that replaces the loader has (DALI's
            threads), its value there when unset; such a setting is None without it.
        values: the closed set of values it may take (checked), or None.
        searched: a knob a search space may name (``drop_last`` is the recipe's, not one).
        shapes_batches: it changes which samples the loop receives in which batch, or in
            what order (``batch_size``, ``drop_last``, ``in_order``): a training run's own
            choice, which ``autotune.DataLoader`` keeps as passed while it tunes the rest.
        label: its part of a config's progress line (``w4``, ``persist``), or None.
    """

    layer: Layer
    torch_default: Any = NO_DEFAULT
    worth_rank: int = 100
    inactive: Any = FIELD_DEFAULT
    needs_workers: bool = False
    needs_cuda: bool = False
    as_is: Any = TUNED
    replaced_by_loader: bool = False
    own_loader_default: int | None = None
    values: tuple[Any, ...] | None = None
    searched: bool = True
    shapes_batches: bool = False
    label: Label | None = None


def knob(default: Any, layer: Layer, **traits: Any) -> Any:
    """A ``PipelineConfig`` field: its default, its layer and its other ``KnobTraits`` (read
    back by ``table``)."""
    return dataclasses.field(default=default, metadata={"knob": KnobTraits(layer, **traits)})


def table(cls: type) -> dict[str, KnobTraits]:
    """Every field of the dataclass ``cls`` by name, with its traits (``inactive`` resolved
    to the field's default where it is ``FIELD_DEFAULT``), in declaration order; a field
    declared without traits is an error."""
    out: dict[str, KnobTraits] = {}
    for field in dataclasses.fields(cls):
        traits = field.metadata.get("knob")
        if traits is None:
            raise TypeError(
                f"{cls.__name__}.{field.name} has no knob traits: declare it with knob()"
            )
        if traits.inactive is FIELD_DEFAULT:
            traits = dataclasses.replace(traits, inactive=field.default)
        out[field.name] = traits
    return out
