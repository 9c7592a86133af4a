"""PipelineConfig: one point of the search space, and the ``best.yaml`` a user takes home."""

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
PIPELINE_KEYS = ("decoder", "main_threads")


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

    def __post_init__(self) -> None:
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

    @property
    def buffered_batches(self) -> int:
        """Batches the loader holds ready once started: what a warm-up must drain."""
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
        parts = [f"w{self.num_workers}"]
        if self.num_workers:
            parts.append(f"pf{self.prefetch_factor or 2}")
            if self.persistent_workers:
                parts.append("persist")
        if self.pin_memory:
            parts.append("pin")
        parts.append(self.decoder)
        parts.append(f"t{self.main_threads}" if self.main_threads else "t-default")
        parts.append(f"bs{self.batch_size}")
        return " ".join(parts)
