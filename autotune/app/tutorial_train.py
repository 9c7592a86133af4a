"""The PyTorch tutorial's training script, as a user writes it, for the ``online`` benchmark:
``ImageFolder`` with ``transforms.v2``, ``DataLoader(dataset, batch_size, shuffle=True)``, the
benchmark's small CNN, SGD, a plain loop over epochs.

``--loader`` is the one line a user changes:

- ``torch``: the script untouched;
- ``autotune``: ``autotune.DataLoader`` in its place, tuning while it trains (``--storage``:
  where it records what it tried and kept, and where a second run starts);
- ``loader_kwargs``: ``DataLoader(dataset, shuffle=True, **autotune.loader_kwargs(best))``,
  the offline study's pick.

``--ranks N`` runs it as ``torchrun --nproc-per-node N`` would: N processes in one gloo
group (``OMP_NUM_THREADS=1`` each, as torchrun sets it), each over its ``DistributedSampler``
share, the model in ``DistributedDataParallel``.

    python -m autotune.app.tutorial_train --root DIR --epochs 30 --loader autotune

Prints one JSON line: each epoch's seconds (rank 0's), the loop's, and (``autotune``) what it
kept.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets
from torchvision.transforms import v2

import autotune
from autotune.runtime.workload import TinyCNN

LOADERS = ("torch", "autotune", "loader_kwargs")
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _loader(
    args: argparse.Namespace, dataset: datasets.ImageFolder, sampler: DistributedSampler | None
) -> DataLoader:
    order: dict[str, Any] = {"sampler": sampler} if sampler else {"shuffle": True}
    if args.loader == "loader_kwargs":
        return DataLoader(dataset, **order, **autotune.loader_kwargs(args.best))
    if args.loader == "autotune":
        return autotune.DataLoader(
            dataset, batch_size=args.batch_size, storage=args.storage, **order
        )
    return DataLoader(dataset, batch_size=args.batch_size, **order)


def train(args: argparse.Namespace) -> dict[str, Any]:
    """The tutorial's loop; what it measured."""
    torch.manual_seed(args.seed)
    transform = v2.Compose(
        [
            v2.RandomResizedCrop(args.crop, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    started = time.perf_counter()
    dataset = datasets.ImageFolder(args.root, transform=transform)
    sampler = DistributedSampler(dataset, seed=args.seed) if dist.is_initialized() else None
    loader = _loader(args, dataset, sampler)
    model: torch.nn.Module = TinyCNN(num_classes=len(dataset.classes))
    if sampler is not None:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    epochs = []
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        epoch_started = time.perf_counter()
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        epochs.append(round(time.perf_counter() - epoch_started, 4))
    measured: dict[str, Any] = {
        "loop_s": round(time.perf_counter() - started, 3),
        "epochs_s": epochs,
    }
    if isinstance(loader, autotune.DataLoader):
        measured["kept"] = loader.settings.short()
        measured["tried"] = len({r.settings for r in loader.readings})
        measured["switches"] = len(loader.switches)
        measured["rechecks"] = loader.explorer.rechecks if loader.explorer else 0
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.app.tutorial_train")
    parser.add_argument("--root", required=True, help="a folder of class sub-folders")
    parser.add_argument("--loader", choices=LOADERS, default="torch")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--crop", type=int, default=224)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--best", help="the best.yaml of --loader loader_kwargs")
    parser.add_argument("--storage", default="sqlite:///studies/autotune.db")
    parser.add_argument("--ranks", type=int, default=1, help="processes, as torchrun starts")
    args = parser.parse_args(argv)
    if args.loader == "loader_kwargs" and not args.best:
        parser.error("--loader loader_kwargs needs --best")
    if args.ranks == 1:
        print(json.dumps(train(args)), flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="tutorial-ranks-") as folder:
        torch.multiprocessing.start_processes(
            _rank, args=(args, folder), nprocs=args.ranks, start_method="fork"
        )
        print((Path(folder) / "rank0.json").read_text(), flush=True)
    return 0


def _rank(rank: int, args: argparse.Namespace, folder: str) -> None:
    """One rank, as torchrun starts it; rank 0's measurement to ``folder``."""
    os.environ.update(OMP_NUM_THREADS="1", LOCAL_WORLD_SIZE=str(args.ranks), RANK=str(rank))
    torch.set_num_threads(1)
    init = f"file://{folder}/rendezvous"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=args.ranks)
    try:
        measured = train(args)
        if rank == 0:
            (Path(folder) / "rank0.json").write_text(json.dumps(measured))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(main())
