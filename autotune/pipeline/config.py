"""PipelineConfig: one point of the search space; the `loader:` and `pipeline:` sections of
the best.yaml a user takes home (`best_file` writes and reads the whole file)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from autotune.errors import UsageError

LOADER_KEYS = (
    "batch_size",
    "num_workers",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory",
    "drop_last",
)
PIPELINE_KEYS = (
    "decoder",
    "main_threads",
    "augment_on",
    "transfer",
    "device_prefetch",
    "channels_last",
    "dali_num_threads",
    "dali_prefetch_queue_depth",
    "cache",
)
# Decoders that decode a whole batch on the device in the training process: the workers only
# read bytes, and augmentation necessarily follows on the device.
DEVICE_DECODERS = ("nvjpeg", "dali")
# Not a decoder: the user's own Dataset as it is (for a folder, the tutorial's ImageFolder with
# transforms.v2), read by a DataLoader; only the DataLoader's arguments and the training
# process's threads are tuned. The baseline is this with PyTorch's defaults.
AS_IS = "as_is"
# what "as it is" keeps: the Dataset's own output crosses as it comes, copied with .to(device)
AS_IS_FIXED = {
    "augment_on": "cpu",
    "transfer": "float",
    "device_prefetch": False,
    "channels_last": False,
    "drop_last": False,
    "cache": "none",
}
AUGMENT_ON = ("cpu", "gpu")
# a prepared copy of the images (pipeline/prepared.py): none, re-encoded at the size the
# recipe needs, or decoded pixels at that size
CACHES = ("none", "resized", "decoded")
TRANSFERS = ("uint8", "float")


_DALI_DEFAULTS = {"dali_num_threads": 2, "dali_prefetch_queue_depth": 2}  # DALI's own
_NO_LOADER = {  # DALI's own queue and copies replace these
    "num_workers": 0,
    "prefetch_factor": None,
    "persistent_workers": False,
    "pin_memory": False,
    "device_prefetch": False,
}


@dataclass(frozen=True)
class PipelineConfig:
    """Everything the tuner chooses: DataLoader arguments plus pipeline choices.

    Example:
        >>> cfg = PipelineConfig(num_workers=4, prefetch_factor=2, decoder="pil_reduced")
        >>> torch.utils.data.DataLoader(dataset, **cfg.loader_kwargs())
    """

    batch_size: int = 32
    num_workers: int = 0
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    pin_memory: bool = False
    drop_last: bool = True
    decoder: str = "pil"
    main_threads: int | None = None  # torch intra-op threads in the training process
    # cpu: crop/resize/flip per sample in the workers; gpu: per batch on the device (kornia)
    augment_on: str = "cpu"
    # what crosses to the device (augment_on=cpu): uint8 crops, normalized there (4x fewer
    # bytes), or float32 normalized in the workers
    transfer: str = "uint8"
    device_prefetch: bool = False  # copy batch N+1 on a side CUDA stream while step N runs
    channels_last: bool = False  # NHWC batches (and model) for tensor-core convolutions
    # decoder=dali only: DALI's CPU threads and its queue of ready batches
    dali_num_threads: int | None = None
    dali_prefetch_queue_depth: int | None = None
    cache: str = "none"

    def __post_init__(self) -> None:
        if self.as_is:
            for key, value in AS_IS_FIXED.items():
                object.__setattr__(self, key, value)
        if self.cache == "decoded" and self.decoder not in (AS_IS, "dali"):
            # nothing left to decode: one name for every decoder (refused with DALI below)
            object.__setattr__(self, "decoder", "pil")
        # a device decoder hands the device whole images: augmentation can only follow there,
        # and device-side augmentation needs the uint8 images, not normalized floats
        if self.decoder in DEVICE_DECODERS:
            object.__setattr__(self, "augment_on", "gpu")
        if self.decoder == "dali":  # DALI replaces the DataLoader: its settings do not apply
            for key, value in _DALI_DEFAULTS.items():
                if getattr(self, key) is None:
                    object.__setattr__(self, key, value)
            for key, value in _NO_LOADER.items():
                object.__setattr__(self, key, value)
        else:
            object.__setattr__(self, "dali_num_threads", None)
            object.__setattr__(self, "dali_prefetch_queue_depth", None)
        if self.augment_on == "gpu":
            object.__setattr__(self, "transfer", "uint8")
        if self.augment_on not in AUGMENT_ON:
            raise UsageError(f"augment_on must be one of {AUGMENT_ON}, got {self.augment_on!r}")
        if self.transfer not in TRANSFERS:
            raise UsageError(f"transfer must be one of {TRANSFERS}, got {self.transfer!r}")
        if self.cache not in CACHES:
            raise UsageError(f"cache must be one of {CACHES}, got {self.cache!r}")
        if self.cache == "decoded" and self.decoder == "dali":
            raise UsageError(
                "cache=decoded hands pixels to the workers, and DALI reads files itself: "
                "use cache=resized with decoder=dali"
            )
        if self.batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.num_workers < 0:
            raise UsageError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            raise UsageError(
                "prefetch_factor and persistent_workers need num_workers > 0 "
                f"(got num_workers=0, {self.prefetch_factor=}, {self.persistent_workers=})"
            )
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise UsageError(f"prefetch_factor must be >= 1, got {self.prefetch_factor}")
        if self.main_threads is not None and self.main_threads < 1:
            raise UsageError(f"main_threads must be >= 1, got {self.main_threads}")
        for key in _DALI_DEFAULTS:
            value = getattr(self, key)
            if value is not None and value < 1:
                raise UsageError(f"{key} must be >= 1, got {value}")

    @property
    def as_is(self) -> bool:
        """The user's own Dataset as it is, with only the loader's settings tuned."""
        return self.decoder == AS_IS

    @property
    def workers_restart(self) -> bool:
        """Whether each epoch spawns its workers anew (``persistent_workers`` off)."""
        return self.num_workers > 0 and not self.persistent_workers

    @property
    def buffered_batches(self) -> int:
        """Batches the loader holds ready once started: what a warm-up must drain."""
        if self.dali_prefetch_queue_depth is not None:
            return self.dali_prefetch_queue_depth
        if self.num_workers == 0:
            return 0
        return self.num_workers * (self.prefetch_factor or 2)

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
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(flat) - known)
        if unknown:
            raise UsageError(f"unknown pipeline settings {unknown}; known: {sorted(known)}")
        return cls(**flat)

    def short(self) -> str:
        """A compact label for progress lines: ``w4 pf2 persist pil_reduced t1 bs32``."""
        if self.decoder == "dali":  # no DataLoader: DALI's threads and queue instead
            parts = [f"dali th{self.dali_num_threads} q{self.dali_prefetch_queue_depth}"]
        else:
            parts = [f"w{self.num_workers}"]
            if self.num_workers:
                parts.append(f"pf{self.prefetch_factor or 2}")
                if self.persistent_workers:
                    parts.append("persist")
            if self.pin_memory:
                parts.append("pin")
            # a decoded copy's pixels need no decoder
            parts.append("decoded" if self.cache == "decoded" else self.decoder)
            if self.cache == "resized":
                parts.append("resized")
            if self.augment_on != "cpu":
                parts.append(f"aug-{self.augment_on}")
        if self.transfer != "uint8" and not self.as_is:
            parts.append(self.transfer)
        if self.device_prefetch:
            parts.append("prefetch")
        if self.channels_last:
            parts.append("nhwc")
        parts.append(f"t{self.main_threads}" if self.main_threads else "t-default")
        parts.append(f"bs{self.batch_size}")
        return " ".join(parts)
