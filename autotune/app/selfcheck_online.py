"""The path of ``autotune.DataLoader`` that ``python -m autotune.selfcheck`` checks: the study's
JPEGs as a user's Dataset, feeding the device's training step while the loader explores, its
batches compared with those of torch's loader over the same generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.io import decode_jpeg
from torchvision.transforms import v2

import autotune
from autotune.app.selfcheck_paths import BATCH, Bench
from autotune.pipeline.sources import Source
from autotune.runtime.workload import TrainStep, build_model
from autotune.schema import WindowConfig

REPEATS = 6  # the study's 48 files six times: epochs of 36 batches, each setting timeable
EPOCHS = 4
EXPLORE_EPOCHS = 2.0  # tune=: two epochs' time at the first rate
# short timings (a path, not a figure): two sub-windows of two batches after one warm-up
WINDOW = WindowConfig(
    warmup_extra_batches=1,
    sub_windows=2,
    batches_per_window=2,
    min_sub_window_s=0.0,
    target_spread=0.0,
)


class Photos(Dataset):
    """The files as a user's Dataset reads them (decoded, randomly cropped), each sample
    labelled with its index: the check compares indices."""

    def __init__(self, source: Source, crop: int) -> None:
        self.source = source
        self.transform = v2.Compose(
            [v2.RandomResizedCrop(crop, antialias=True), v2.ToDtype(torch.float32, scale=True)]
        )

    def __len__(self) -> int:
        return len(self.source) * REPEATS

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        data = self.source.read(index % len(self.source))
        image = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return self.transform(image), index


def online_loader(device: str) -> Callable[[Bench], str]:
    """``autotune.DataLoader`` (two workers to start, the device's model stepping on each
    batch, exploring for two epochs' time) gives torch's batches of indices in torch's order
    in every epoch, and measured more than its start."""

    def run(bench: Bench) -> str:
        conf = bench.conf(device)
        dataset = Photos(bench.source, conf.recipe.crop_size)
        classes = len(bench.source.classes)

        def seeded(**extra: Any) -> dict[str, Any]:
            return {"batch_size": BATCH, "shuffle": True, **extra,
                    "generator": torch.Generator().manual_seed(0)}  # fmt: skip

        indices = DataLoader(range(len(dataset)), **seeded())  # the same generator draws
        expected = [[b.tolist() for b in indices] for _ in range(EPOCHS)]
        loader = autotune.DataLoader(
            dataset, **seeded(num_workers=2), tune=EXPLORE_EPOCHS, window=WINDOW,
            storage=f"sqlite:///{bench.folder / f'online-{device}.db'}",
        )  # fmt: skip
        model = build_model(conf.model, num_classes=classes)
        step = TrainStep(model, torch.device(device), lr=conf.model.lr, precision=conf.precision)
        got, pinned, batches = [], 0, 0
        for _ in range(EPOCHS):
            epoch = []
            for images, index in loader:
                pinned += images.is_pinned()
                batches += 1
                images = images.to(device, non_blocking=True)
                step((images, (index % classes).to(device, non_blocking=True)))
                epoch.append(index.tolist())
            got.append(epoch)
        assert got == expected, "the batches differ from torch's loader's with the same generator"
        measured = {r.settings for r in loader.readings}
        assert len(measured) >= 2, f"{len(measured)} setting(s) measured: it did not explore"
        # a loop that trains on the CPU never initializes CUDA: no pinning offered to it
        assert device == "cuda" or not pinned, f"{pinned} batches pinned on a CPU loop"
        return (
            f"{EPOCHS} epochs of torch's batches; {len(measured)} settings measured, "
            f"{len(loader.switches)} switches, kept {loader.settings.short()}, "
            f"{pinned}/{batches} batches pinned"
        )

    return run
