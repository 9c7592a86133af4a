"""A training script's input side, run under torchrun by the tests: builds the tuned loader
from a best.yaml and writes what this rank read, with the settings its loader got."""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
from torch.utils.data import Dataset

import autotune


class Numbered(Dataset):
    """Sample i is the tensor [i]: what a rank read is its indices."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.tensor([index]), index


def main(best: str, out: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = autotune.build_loader(Numbered(), best)
    epochs = [[int(i) for _, labels in loader for i in labels] for _ in range(2)]
    dataloader = loader.dataloader
    record = {
        "rank": int(os.environ["RANK"]),
        "epochs": epochs,
        "num_workers": dataloader.num_workers,
        "prefetch_factor": dataloader.prefetch_factor,
        "threads": torch.get_num_threads(),
        "warnings": [str(w.message) for w in caught],
    }
    with open(os.path.join(out, f"rank{record['rank']}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
