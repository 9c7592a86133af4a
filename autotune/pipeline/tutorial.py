"""The pipeline the PyTorch tutorials teach, for a folder of class sub-folders: the baseline
every speedup is a ratio to, and the user's Dataset "as it is" for a folder.

``torchvision.datasets.ImageFolder(root)`` with its default PIL loader and a
``transforms.v2.Compose`` of the study's recipe (``Recipe.tutorial_transform``); read by
``DataLoader(dataset, batch_size, shuffle=True)`` with no other arguments.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch.utils.data import Dataset, Subset
from torchvision.datasets import ImageFolder

from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source


def tutorial_dataset(
    source: Source, recipe: Recipe, sample_paths: Iterable[str] | None = None
) -> Dataset:
    """``ImageFolder(root)`` with its default loader, restricted to ``sample_paths`` (or to
    the source's readable files, where the scan skipped some) by a ``Subset``, in the source's
    order: index i is the source's sample i. A class folder without images is allowed: the
    scan left it out too."""
    dataset = ImageFolder(
        str(source.root), transform=recipe.tutorial_transform(), allow_empty=True
    )
    wanted = source.paths if sample_paths is None else tuple(sample_paths)
    if list(wanted) == [path for path, _ in dataset.samples]:
        return dataset
    index = {path: i for i, (path, _) in enumerate(dataset.samples)}
    return Subset(dataset, [index[path] for path in wanted if path in index])


def describe(recipe: Recipe, batch_size: int, threads: int) -> str:
    """The baseline in one line, as best.yaml and the report state it."""
    steps = ", ".join(type(t).__name__ for t in recipe.tutorial_transform().transforms)
    return (
        f"ImageFolder(root) with its PIL loader and transforms.v2 [{steps}] ({recipe.name}); "
        f"DataLoader(dataset, batch_size={batch_size}, shuffle=True); torch's {threads} threads"
    )
