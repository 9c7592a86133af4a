"""The benchmark's scenarios: the data, model, recipe and space each one measures on, and what
it adds to the head-to-head."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from autotune.report.benchmark_results import TIMED_BUDGET

TUNER_BUDGET = TIMED_BUDGET  # the tuner's trials, as a fraction of the grid's


@dataclass(frozen=True)
class Scenario:
    overrides: tuple[str, ...]
    about: str
    needs_cuda: bool = False
    ranks: int = 1  # > 1: tuned per rank at this many ranks against copied settings
    latency_ms: float = 0.0  # > 0: the dataset read through slow storage (a FUSE mount)
    tuner_budget: float = TUNER_BUDGET
    rival: str = ""  # a contender from the grid (``RIVALS``)
    online: bool = False  # the tutorial script's whole runs: online against offline

    def with_latency(self, latency_ms: float) -> Scenario:
        """This scenario behind slow storage of another latency."""
        about = self.about.replace(f"{self.latency_ms:g} ms", f"{latency_ms:g} ms")
        return dataclasses.replace(self, latency_ms=latency_ms, about=about)


_SPACE = "search_space=benchmark"
_SMALL = ("dataset=synthetic", "model=tiny", "recipe=imagenet_train", "recipe.crop_size=112")

SCENARIOS = {
    "small": Scenario(
        (*_SMALL, _SPACE), "ImageNet-sized synthetic JPEGs, model=tiny, imagenet_train at 112"
    ),
    "storage": Scenario(
        (*_SMALL, "search_space=benchmark_storage"),
        "the small scenario's data behind 20 ms of added latency per open and read (FUSE)",
        latency_ms=20.0,
        tuner_budget=0.5,
        rival="capped",
    ),
    "cached": Scenario(
        (*_SMALL, "search_space=benchmark_cached", "study.epochs=90"),
        "the small scenario over 90 planned epochs, a decoded copy in the space",
        rival="uncached",
    ),
    "hd": Scenario(
        (
            "dataset=synthetic_hd",
            "model=tiny",
            "recipe=center_crop_eval",
            "recipe.crop_size=224",
            _SPACE,
        ),
        "1920x1080 synthetic JPEGs, model=tiny, center_crop_eval at 224",
    ),
    "gpu": Scenario(
        ("dataset=synthetic", "model=resnet50", "recipe.crop_size=224", "device=cuda", _SPACE),
        "ImageNet-sized synthetic JPEGs, resnet50 on the GPU, imagenet_train at 224",
        needs_cuda=True,
    ),
    "gpu_hd": Scenario(
        (
            "dataset=synthetic_hd",
            "model=resnet50",
            "recipe=center_crop_eval",
            "device=cuda",
            _SPACE,
        ),
        "1920x1080 synthetic JPEGs, resnet50 on the GPU, center_crop_eval at 224",
        needs_cuda=True,
    ),
    "online": Scenario(
        ("dataset=synthetic", "model=tiny", "recipe=imagenet_train"),
        "the tutorial script on the default synthetic set: autotune.DataLoader in its run, "
        "against the script untouched and the offline study's loader_kwargs",
        online=True,
    ),
    "online_storage": Scenario(
        ("dataset=synthetic", "model=tiny", "recipe=imagenet_train"),
        "the online scenario's data behind 5 ms of added latency per open and read (FUSE): "
        "reads wait, workers beyond the cores pay",
        latency_ms=5.0,
        online=True,
    ),
    "ranks": Scenario(
        ("dataset=synthetic", "model=tiny", "device=cpu", "study.worth_budget=0"),
        "ImageNet-sized synthetic JPEGs, model=tiny, 2 ranks (DDP, gloo) on the CPU: tuned "
        "per rank against settings copied to the ranks",
        ranks=2,
    ),
}
