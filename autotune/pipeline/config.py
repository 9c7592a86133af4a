"""PipelineConfig: one point of the search space; the `loader:` and `pipeline:` sections of
the best.yaml a user takes home (`best_file` writes and reads the whole file).

It is also the knob table: each field declares its traits once (``knob_table.KnobTraits``),
and every list of knobs the other layers use derives from ``KNOBS`` below. Adding a knob is
one field here, its search-space YAML lines, and tests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from autotune.errors import UsageError
from autotune.pipeline import decoders
from autotune.pipeline.knob_table import BASELINE, TUNED, KnobTraits, Layer, knob, table

LOADER, MAIN, PIPELINE, DEVICE = Layer.LOADER, Layer.MAIN, Layer.PIPELINE, Layer.DEVICE

# Not a decoder: the user's own Dataset as it is (for a folder, the tutorial's ImageFolder with
# transforms.v2), read by a DataLoader; only the DataLoader's arguments and the training
# process's threads are tuned. The baseline is this with PyTorch's defaults.
AS_IS = "as_is"
# the decoder knob's values: the user's pipeline as it is, or one of the tuner's decoders
DECODER_VALUES = (AS_IS, *decoders.DECODERS)


@dataclass(frozen=True)
class PipelineConfig:
    """Everything the tuner chooses: DataLoader arguments plus pipeline choices.

    The fields are in the order of a config's progress line (``short``).

    Example:
        >>> cfg = PipelineConfig(num_workers=4, prefetch_factor=2, decoder="pil_reduced")
        >>> torch.utils.data.DataLoader(dataset, **cfg.loader_kwargs())
    """

    # the knob table, one field a knob (fmt: off keeps it a table)
    # fmt: off
    num_workers: int = knob(
        0, LOADER, torch_default=0, worth_rank=3, replaced_by_loader=True,
        label=lambda c: f"w{c.num_workers}",
    )
    prefetch_factor: int | None = knob(  # batches per worker; None: DataLoader's 2
        None, LOADER, torch_default=None, worth_rank=4, needs_workers=True,
        replaced_by_loader=True, label=lambda c: f"pf{c.prefetch_factor or 2}",
    )
    persistent_workers: bool = knob(  # workers kept alive between epochs
        False, LOADER, torch_default=False, worth_rank=2, needs_workers=True,
        replaced_by_loader=True, label=lambda c: "persist" if c.persistent_workers else None,
    )
    pin_memory: bool = knob(  # page-locked batches, copied with non_blocking=True
        False, LOADER, torch_default=False, worth_rank=5, needs_cuda=True,
        replaced_by_loader=True, label=lambda c: "pin" if c.pin_memory else None,
    )
    # False: a worker's batch is handed over as soon as it is ready, not in sampler order;
    # eases head-of-line blocking on uneven samples (which batch comes when changes)
    in_order: bool = knob(
        True, LOADER, torch_default=True, worth_rank=11, needs_workers=True,
        replaced_by_loader=True, shapes_batches=True,
        label=lambda c: None if c.in_order else "unordered",
    )
    drop_last: bool = knob(  # the recipe's semantics
        True, LOADER, as_is=False, searched=False, shapes_batches=True,
    )
    decoder: str = knob(  # inactive: a space without decoders tunes the pipeline as it is
        "pil", PIPELINE, inactive=AS_IS, as_is=AS_IS, values=DECODER_VALUES,
        label=lambda c: "decoded" if c.cache == "decoded" else c.decoder,  # nothing to decode
    )
    # a decoder that replaces the DataLoader (DALI): its CPU threads and its queue of batches
    dali_num_threads: int | None = knob(
        None, PIPELINE, as_is=None, needs_cuda=True, own_loader_default=2,
        label=lambda c: f"th{c.dali_num_threads}" if c.dali_num_threads else None,
    )
    dali_prefetch_queue_depth: int | None = knob(
        None, PIPELINE, as_is=None, needs_cuda=True, own_loader_default=2,
        label=lambda c: f"q{c.dali_prefetch_queue_depth}" if c.dali_prefetch_queue_depth else None,
    )
    # a prepared copy of the images (pipeline/prepared.py): none, re-encoded at the size the
    # recipe needs, or decoded pixels at that size; PyTorch's: decoded from disk every epoch
    cache: str = knob(
        "none", PIPELINE, torch_default="none", worth_rank=0, as_is="none",
        values=("none", "resized", "decoded"),
        label=lambda c: "resized" if c.cache == "resized" else None,
    )
    # cpu: crop/resize/flip per sample in the workers; gpu: per batch on the device (kornia)
    augment_on: str = knob(
        "cpu", DEVICE, torch_default="cpu", worth_rank=6, needs_cuda=True, as_is="cpu",
        values=("cpu", "gpu"),
        label=lambda c: (
            None if c.augment_on == "cpu" or c.replaces_loader else f"aug-{c.augment_on}"
        ),
    )
    # what crosses to the device (augment_on=cpu): uint8 crops, normalized there (4x fewer
    # bytes), or float32 normalized in the workers (PyTorch's tutorial; as it is: what the
    # Dataset gives)
    transfer: str = knob(
        "uint8", DEVICE, torch_default="float", worth_rank=7, needs_cuda=True, as_is="float",
        values=("uint8", "float"),
        label=lambda c: c.transfer if c.transfer != "uint8" and not c.as_is else None,
    )
    device_prefetch: bool = knob(  # copy batch N+1 on a side CUDA stream while step N runs
        False, DEVICE, torch_default=False, worth_rank=8, needs_cuda=True, as_is=False,
        replaced_by_loader=True, label=lambda c: "prefetch" if c.device_prefetch else None,
    )
    channels_last: bool = knob(  # NHWC batches (and model) for tensor-core convolutions
        False, DEVICE, torch_default=False, worth_rank=9, needs_cuda=True, as_is=False,
        label=lambda c: "nhwc" if c.channels_last else None,
    )
    main_threads: int | None = knob(  # torch intra-op threads in the training process
        None, MAIN, torch_default=BASELINE, worth_rank=1,
        label=lambda c: f"t{c.main_threads}" if c.main_threads else "t-default",
    )
    batch_size: int = knob(  # inactive None: always active
        32, LOADER, torch_default=BASELINE, worth_rank=10, inactive=None, shapes_batches=True,
        label=lambda c: f"bs{c.batch_size}",
    )
    # fmt: on

    def __post_init__(self) -> None:
        for name, values in _CLOSED_SETS:
            if getattr(self, name) not in values:
                raise UsageError(f"{name} must be one of {values}, got {getattr(self, name)!r}")
        if self.as_is:
            for name, value in AS_IS_FIXED.items():
                object.__setattr__(self, name, value)
        own_loader = self.replaces_loader
        if self.cache == "decoded" and not (self.as_is or own_loader):
            # nothing left to decode: one name for every decoder (refused with DALI below)
            object.__setattr__(self, "decoder", decoders.PilDecoder.name)
        # a device decoder hands the device whole images: augmentation can only follow there,
        # and device-side augmentation needs the uint8 images, not normalized floats
        if self.decodes_on_device:
            object.__setattr__(self, "augment_on", "gpu")
        for name, default in _OWN_LOADER_DEFAULTS.items():  # a setting of the loader's replacement
            value = getattr(self, name)
            object.__setattr__(
                self, name, (default if value is None else value) if own_loader else None
            )
        if own_loader:  # the DataLoader's machinery: its replacement brings its own
            for name, inactive in _REPLACED_BY_LOADER:
                object.__setattr__(self, name, inactive)
        if self.augment_on == "gpu":
            object.__setattr__(self, "transfer", "uint8")
        if self.cache == "decoded" and own_loader:
            raise UsageError(
                f"cache=decoded hands pixels to the workers, and decoder={self.decoder} reads "
                f"files itself: use cache=resized with decoder={self.decoder}"
            )
        if self.batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.num_workers < 0:
            raise UsageError(f"num_workers must be >= 0, got {self.num_workers}")
        idle = [n for n, inactive in _WORKERS_IDLE.items() if getattr(self, n) != inactive]
        if self.num_workers == 0 and idle:
            got = ", ".join(f"{n}={getattr(self, n)!r}" for n in idle)
            raise UsageError(f"{', '.join(NEED_WORKERS)} need num_workers > 0 (got {got})")
        for name in ("prefetch_factor", "main_threads", *_OWN_LOADER_DEFAULTS):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{name} must be >= 1, got {value}")

    @property
    def as_is(self) -> bool:
        """The user's own Dataset as it is, with only the loader's settings tuned."""
        return self.decoder == AS_IS

    @property
    def decodes_on_device(self) -> bool:
        """Whether the decoder decodes whole batches on the device in the training process."""
        found = decoders.DECODERS.get(self.decoder)
        return bool(found and found.on_device)

    @property
    def replaces_loader(self) -> bool:
        """Whether the decoder is a whole pipeline of its own (DALI) in place of the
        DataLoader: the DataLoader's settings do not apply."""
        found = decoders.DECODERS.get(self.decoder)
        return bool(found and found.replaces_loader)

    @property
    def workers_restart(self) -> bool:
        """Whether each epoch spawns its workers anew (``persistent_workers`` off)."""
        return self.num_workers > 0 and not self.persistent_workers

    @property
    def workers_persist(self) -> bool:
        """Whether its workers live from one epoch to the next (``persistent_workers`` on)."""
        return self.num_workers > 0 and self.persistent_workers

    @property
    def buffered_batches(self) -> int:
        """Batches the loader holds ready once started: what a warm-up must drain."""
        if self.dali_prefetch_queue_depth is not None:
            return self.dali_prefetch_queue_depth
        if self.num_workers == 0:
            return 0
        return self.num_workers * (self.prefetch_factor or 2)

    def without_workers(self, **changes: Any) -> PipelineConfig:
        """This config read in the training process (``num_workers=0``), every setting that
        needs workers back at its inactive value, with ``changes``."""
        return dataclasses.replace(self, **{**_WORKERS_IDLE, **changes, "num_workers": 0})

    def switched_to(self, other: PipelineConfig) -> PipelineConfig:
        """This config with ``other``'s ``SWITCHABLE`` settings: what a running loader may
        change between two batches."""
        return dataclasses.replace(self, **{k: getattr(other, k) for k in SWITCHABLE})

    def loader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments ``torch.utils.data.DataLoader`` accepts as they stand."""
        return {key: getattr(self, key) for key in LOADER_KEYS}

    def pipeline_choices(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in PIPELINE_KEYS}

    def to_dict(self) -> dict[str, Any]:
        return {"loader": self.loader_kwargs(), "pipeline": self.pipeline_choices()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PipelineConfig:
        """Reads the ``loader:`` and ``pipeline:`` sections of a best.yaml (or a flat dict)."""
        flat = {**data.get("loader", {}), **data.get("pipeline", {})} if "loader" in data else data
        unknown = sorted(set(flat) - set(KNOBS))
        if unknown:
            raise UsageError(f"unknown pipeline settings {unknown}; known: {sorted(KNOBS)}")
        return cls(**flat)

    def short(self) -> str:
        """A compact label for progress lines: ``w4 pf2 persist pil_reduced t1 bs32``; a
        setting that does not apply here (a worker setting without workers, the DataLoader's
        with a decoder that replaces it) is left out."""
        parts = []
        for traits in KNOBS.values():
            if traits.label is None:
                continue
            if traits.needs_workers and not self.num_workers:
                continue
            if traits.replaced_by_loader and self.replaces_loader:
                continue
            part = traits.label(self)
            if part:
                parts.append(part)
        return " ".join(parts)


# The knob table: every field's traits, by name, in declaration order.
KNOBS: dict[str, KnobTraits] = table(PipelineConfig)
LOADER_KEYS = tuple(n for n, t in KNOBS.items() if t.layer is Layer.LOADER)
PIPELINE_KEYS = tuple(n for n, t in KNOBS.items() if t.layer is not Layer.LOADER)
# DataLoader refuses these with num_workers=0 (a search space must say `when: num_workers > 0`)
NEED_WORKERS = tuple(n for n, t in KNOBS.items() if t.needs_workers)
# only tried on a CUDA device
NEED_CUDA = tuple(n for n, t in KNOBS.items() if t.needs_cuda)
# what autotune.DataLoader may change between two batches of a training run: the pipeline as
# it is's settings that leave the batches the loop receives as they are
SWITCHABLE = tuple(n for n, t in KNOBS.items() if t.as_is is TUNED and not t.shapes_batches)
# what "as it is" holds: the Dataset's own output crosses as it comes, copied with .to(device)
AS_IS_FIXED = {n: t.as_is for n, t in KNOBS.items() if t.as_is is not TUNED}
# what __post_init__ reads for every config, worked out once
_WORKERS_IDLE = {n: KNOBS[n].inactive for n in NEED_WORKERS}  # each worker knob, without them
_CLOSED_SETS = tuple((n, t.values) for n, t in KNOBS.items() if t.values is not None)
_OWN_LOADER_DEFAULTS = {  # a loader-replacing decoder's settings (DALI's threads, queue)
    n: t.own_loader_default for n, t in KNOBS.items() if t.own_loader_default is not None
}
_REPLACED_BY_LOADER = tuple((n, t.inactive) for n, t in KNOBS.items() if t.replaced_by_loader)
# the knobs a search space may name, and the value each takes where its condition fails
INACTIVE = {n: t.inactive for n, t in KNOBS.items() if t.searched}
