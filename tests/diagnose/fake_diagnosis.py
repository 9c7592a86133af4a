"""Hand-made diagnoses for the verdict and report tests: plain values, nothing measured."""

from __future__ import annotations

from autotune.diagnose.diagnosis import Diagnosis
from autotune.diagnose.storage import Storage
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.measurement import Measurement
from autotune.runtime.stages import SampleTime, StageProfile, StageTime

MS = 1e-3


def measured(rate: float, subs: tuple[float, ...] = ()) -> Measurement:
    """A run at ``rate`` samples/s that never waited for data."""
    return Measurement(rate, subs or (rate,), 0.0, 0.0, 0, 1)


def stage_profile(decoder: str, decode_ms: float, other_ms: float = 1.0) -> StageProfile:
    """0.1 ms to read, ``decode_ms`` to decode, ``other_ms`` to augment, 0.1 ms to collate."""
    stages = {
        "read": StageTime(0.1 * MS, 0.1 * MS),
        "decode": StageTime(decode_ms * MS, decode_ms * MS),
        "augment": StageTime(other_ms * MS, other_ms * MS),
        "collate": StageTime(0.1 * MS, 0.1 * MS),
    }
    sample = SampleTime("/data/a.jpg", 1000, 400, 300, 0.0001, decode_ms * MS, other_ms * MS)
    return StageProfile(decoder, stages, (sample,))


def diagnosis(**changes: object) -> Diagnosis:
    """A GPU machine whose loader needs 4.2 ms of CPU per sample with Pillow: 2 CPUs give
    476 samples/s, a tenth of the step's ceiling."""
    values: dict = {
        "name": "x",
        "pipeline": PipelineConfig(num_workers=2, prefetch_factor=2, decoder="pil"),
        "device": "cuda",
        "usable_cpus": 2,
        "images": 100,
        "model": "resnet50",
        "ceiling": measured(5000.0),
        "full": Measurement(450.0, (450.0,), 0.61, 1.0, 8, 40),
        "loader_only": measured(470.0),
        "serial": None,
        "profile": stage_profile("pil", 3.0),
        "copy": StageTime(1e-5, 1e-5),
        "decoders": {
            "pil": stage_profile("pil", 3.0),
            "torchvision": stage_profile("torchvision", 1.5),
        },
        "storage": Storage(),
        "choices": {"num_workers": [0, 1, 2], "decoder": ["pil", "torchvision"]},
    }
    values.update(changes)
    return Diagnosis(**values)
