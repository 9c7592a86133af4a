"""The pipeline as it is: the tutorial's ImageFolder for a folder, and a user's own Dataset
run untouched by ``loader.build`` (its ``__getitem__``, never the tuner's decode), in real
DataLoader workers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import default_loader
from torchvision.transforms import v2

from autotune.pipeline import loader, recipes, tutorial
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.schema import RecipeConfig

RECIPE = recipes.from_config(RecipeConfig(crop_size=32))


class TutorialStyle(Dataset):
    """A Dataset as tutorials write one: a list of files, PIL, transforms.v2. Each read
    leaves a file in ``marks`` (workers are other processes: a counter would stay there)."""

    def __init__(self, source: Source, marks: Path) -> None:
        self.samples = list(zip(source.paths, source.labels, strict=True))
        self.marks = marks
        self.transform = v2.Compose(
            [
                v2.CenterCrop(32),
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(RECIPE.mean, RECIPE.std),
            ]
        )

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        (self.marks / f"{index}-{torch.utils.data.get_worker_info() is not None}").touch()
        path, label = self.samples[index]
        with Image.open(path) as image:
            return self.transform(image.convert("RGB")), label


@pytest.fixture
def tuner_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder where every read of the tuner's own Dataset leaves a file (forked workers
    inherit the patch)."""
    marks = tmp_path / "tuner-reads"
    marks.mkdir()
    tuner_get = loader.EncodedImageDataset.__getitem__

    def counted(self, index):
        (marks / str(index)).touch()
        return tuner_get(self, index)

    monkeypatch.setattr(loader.EncodedImageDataset, "__getitem__", counted)
    return marks


def test_the_pipeline_as_it_is_runs_the_user_s_own_dataset_in_its_workers(
    small_set: Source, tmp_path: Path, tuner_reads: Path
) -> None:
    marks = tmp_path / "reads"
    marks.mkdir()
    dataset = TutorialStyle(small_set, marks)
    config = PipelineConfig(batch_size=4, num_workers=2, prefetch_factor=2, decoder="as_is")
    built = loader.build(dataset, config, recipe=RECIPE, sampler=list(range(8)))
    batches = list(built)
    assert built.dataloader.dataset is dataset
    assert sorted(p.name for p in marks.iterdir()) == sorted(f"{i}-True" for i in range(8))
    assert list(tuner_reads.iterdir()) == []  # the tuner's decode never ran
    # its samples reach the model as they are: the same tensors, batched by default_collate
    images, labels = batches[0]
    expected = torch.stack([dataset[i][0] for i in range(4)])
    assert torch.equal(images, expected) and images.dtype == torch.float32
    assert labels.tolist() == [dataset[i][1] for i in range(4)]


def test_for_a_folder_as_it_is_is_the_tutorial_s_image_folder(
    small_set: Source, tuner_reads: Path
) -> None:
    dataset = tutorial.tutorial_dataset(small_set, RECIPE)
    assert isinstance(dataset, ImageFolder) and dataset.loader is default_loader
    assert [path for path, _ in dataset.samples] == list(small_set.paths)
    config = PipelineConfig(batch_size=4, decoder="as_is")
    built = loader.build(small_set, config, recipe=RECIPE)
    assert isinstance(built.dataloader.dataset, ImageFolder)
    images, _ = next(iter(built))
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32
    assert list(tuner_reads.iterdir()) == []
    # what a user pastes: DataLoader's own arguments, the tutorial's drop_last kept
    assert config.loader_kwargs()["drop_last"] is False
    assert (config.transfer, config.augment_on, config.channels_last) == ("float", "cpu", False)


def test_the_baseline_is_said_in_one_line() -> None:
    line = tutorial.describe(RECIPE, 32, 2)
    assert "\n" not in line
    assert line.startswith("ImageFolder(root) with its PIL loader and transforms.v2 [")
    assert "DataLoader(dataset, batch_size=32, shuffle=True); torch's 2 threads" in line
