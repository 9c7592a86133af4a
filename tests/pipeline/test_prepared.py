"""Prepared copies: made once, found again, never served stale, and giving the pixels (or the
crop statistics) the pipeline without them gives."""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path

import pytest
import torch
from jpegs import exif_jpeg, jpeg, mad, pattern

from autotune.errors import UsageError
from autotune.pipeline import loader, preparation, prepared, sources
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.loader import EncodedImageDataset
from autotune.pipeline.recipes import CenterCropEval, ImagenetTrain
from autotune.pipeline.sources import Source

EVAL = CenterCropEval(crop_size=64, resize_size=72)
TRAIN = ImagenetTrain(crop_size=64)


@pytest.fixture
def folder(tmp_path: Path, small_set: Source) -> Path:
    """A copy of the small set, plus a rotated photo (EXIF 6) and a large PNG."""
    root = tmp_path / "data"
    shutil.copytree(small_set.root, root)
    (root / "class_00" / "rotated.jpg").write_bytes(exif_jpeg(6, (400, 240)))
    pattern(900, 700).save(root / "class_01" / "large.png")
    return root


def crops(data: Source | prepared.DecodedPixels, recipe: object, seed: int) -> list[torch.Tensor]:
    """Every sample through the workers' share of the pipeline (uint8 crops), seeded."""
    torch.manual_seed(seed)
    dataset = EncodedImageDataset(data, recipe=recipe, config=PipelineConfig())  # type: ignore[arg-type]
    return [dataset[i][0] for i in range(len(dataset))]


def test_a_decoded_copy_gives_the_eval_recipes_pixels_and_a_resized_one_within_jpeg_tolerance(
    folder: Path, tmp_path: Path
) -> None:
    source = sources.scan_imagefolder(folder)
    plain = crops(source, EVAL, 0)
    decoded = preparation.ensure(source, EVAL, "decoded", tmp_path / "prepared", processes=2)
    assert all(
        torch.equal(a, b) for a, b in zip(plain, crops(decoded.data(), EVAL, 0), strict=True)
    )
    resized = preparation.ensure(source, EVAL, "resized", tmp_path / "prepared", processes=2)
    far = [mad(a, b) for a, b in zip(plain, crops(resized.data(), EVAL, 0), strict=True)]
    assert max(far) < 4.0, far  # as a reduced decode; re-encoded at quality 95: 1.9-3.6
    # the copy holds what the recipe needs and no more: the shorter side at resize_size
    assert all(min(h, w) == min(72, min(h, w)) for h, w in decoded.sizes)
    assert min(decoded.sizes[-1]) == 72  # the large PNG, shrunk
    assert resized.nbytes < sum(Path(p).stat().st_size for p in source.paths)


@pytest.mark.slow  # a search of its own / a statistical sample: seconds
def test_the_train_recipe_draws_the_same_crops_from_a_prepared_copy(tmp_path: Path) -> None:
    hd = sources.synthetic(count=6, num_classes=1, size=(1920, 1080), cache_dir=tmp_path)
    copy = preparation.ensure(hd, TRAIN, "decoded", tmp_path / "prepared", processes=2)
    (h, w), (height, width) = copy.sizes[0], (1080, 1920)
    assert w < width and h < height  # a crop of 64 pixels leaves pixels to drop
    # the smallest crop RandomResizedCrop can draw still has its 64 pixels a side
    area = TRAIN.scale[0] * w * h
    assert min(math.sqrt(area / TRAIN.ratio[1]), math.sqrt(area * TRAIN.ratio[0])) >= 64
    torch.manual_seed(0)
    full = [TRAIN.plan(width, height) for _ in range(2000)]
    small = [TRAIN.plan(w, h) for _ in range(2000)]

    def share(plans: list, size: tuple[int, int]) -> list[float]:
        return [p.height * p.width / (size[0] * size[1]) for p in plans]

    # the crops' statistics are the same (area share and aspect), only the pixels fewer
    assert statistics.mean(share(full, (height, width))) == pytest.approx(
        statistics.mean(share(small, (h, w))), abs=0.02
    )
    aspect = [statistics.median(p.width / p.height for p in ps) for ps in (full, small)]
    assert aspect[0] == pytest.approx(aspect[1], rel=0.03)
    plain = torch.stack(crops(hd, TRAIN, 1)).float().mean()
    cached = torch.stack(crops(copy.data(), TRAIN, 1)).float().mean()
    assert plain.item() == pytest.approx(cached.item(), abs=3)


def test_a_changed_dataset_invalidates_the_cache(folder: Path, tmp_path: Path) -> None:
    root = tmp_path / "prepared"
    source = sources.scan_imagefolder(folder)
    first = preparation.ensure(source, EVAL, "decoded", root, processes=2)
    again = preparation.ensure(source, EVAL, "decoded", root, processes=2)
    assert again.folder == first.folder and again.seconds == first.seconds  # found, not made
    # one file rewritten in place, same name, same size: the copy must not be served
    victim = Path(source.paths[0])
    data = victim.read_bytes()
    victim.write_bytes(data[:-2] + b"\xff\xd9")
    assert prepared.find(sources.scan_imagefolder(folder), EVAL, "decoded", root) is None
    # a file added: a new key as well
    (folder / "class_00" / "new.jpg").write_bytes(jpeg(pattern(200, 150)))
    changed = sources.scan_imagefolder(folder)
    assert prepared.find(changed, EVAL, "decoded", root) is None
    fresh = preparation.ensure(changed, EVAL, "decoded", root, processes=2)
    assert fresh.folder != first.folder and len(fresh.sizes) == len(changed)
    # another recipe setting: another copy
    other = CenterCropEval(crop_size=64, resize_size=80)
    assert prepared.find(changed, other, "decoded", root) is None


def test_an_unfinished_preparation_leaves_nothing_to_find(folder: Path, tmp_path: Path) -> None:
    source = sources.scan_imagefolder(folder)
    broken = Source(
        source.root, (*source.paths, str(folder / "gone.jpg")), (*source.labels, 0), source.classes
    )
    with pytest.raises(FileNotFoundError):
        preparation.ensure(broken, EVAL, "decoded", tmp_path / "prepared", processes=2)
    assert list((tmp_path / "prepared").iterdir()) == [
        tmp_path
        / "prepared"
        / f".{prepared.folder_of(broken, EVAL, 'decoded', tmp_path / 'prepared').name}.lock"
    ]


def test_workers_read_a_decoded_copy_through_the_loader(small_set: Source, tmp_path: Path) -> None:
    copy = preparation.ensure(small_set, TRAIN, "decoded", tmp_path / "prepared", processes=2)
    config = PipelineConfig(num_workers=2, prefetch_factor=2, batch_size=4, cache="decoded")
    assert config.short().startswith("w2 pf2 decoded")
    batches = list(loader.build(small_set, config, recipe=TRAIN, prepared=copy))
    assert len(batches) == len(small_set) // 4
    assert batches[0][0].shape == (4, 3, 64, 64)
    with pytest.raises(UsageError, match="pass the prepared copy"):
        loader.build(small_set, config, recipe=TRAIN)


def test_a_decoded_copy_needs_no_decoder_and_no_dali() -> None:
    assert PipelineConfig(decoder="opencv", cache="decoded").decoder == "pil"  # one config
    with pytest.raises(UsageError, match="decoder=dali reads files itself"):
        PipelineConfig(decoder="dali", cache="decoded")
    with pytest.raises(UsageError, match="cache must be one of"):
        PipelineConfig(cache="ram")
    assert PipelineConfig(decoder="as_is", cache="decoded").cache == "none"  # as it is
