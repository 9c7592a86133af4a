"""A training script's input side over shards, run under torchrun by the tests: each rank
reads two epochs of ``Shards`` through a DataLoader of two workers and writes a digest of
every sample it read."""

from __future__ import annotations

import hashlib
import json
import os
import sys

from torch.utils.data import DataLoader

from autotune.pipeline.shards import Shards


def main(root: str, out: str) -> None:
    shards = Shards(root, recipe="center_crop_eval", crop_size=32, shuffle_buffer=8)
    epochs = []
    for epoch in range(2):
        shards.set_epoch(epoch)
        loader = DataLoader(shards, batch_size=None, num_workers=2)
        epochs.append([hashlib.sha1(image.numpy().tobytes()).hexdigest() for image, _ in loader])
    rank = int(os.environ["RANK"])
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"epochs": epochs, "length": len(shards)}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
