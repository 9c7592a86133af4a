"""WebDataset shards: written from an image folder or a Dataset of your own, read back as
they were, and split by rank and DataLoader worker so that each sample is read once per
epoch."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from helpers import QUICK, env_with_tests, run_cli, run_python, torchrun
from torch.utils.data import DataLoader

from autotune.app import shard
from autotune.errors import UsageError
from autotune.pipeline import recipes, sources
from autotune.pipeline.shards import MANIFEST, Shards, write
from autotune.pipeline.tutorial import tutorial_dataset
from autotune.pipeline.user_data import UserData
from autotune.schema import RecipeConfig

EVAL = RecipeConfig(name="center_crop_eval", crop_size=32)


def _digest(image: torch.Tensor) -> str:
    return hashlib.sha1(image.numpy().tobytes()).hexdigest()


@pytest.fixture(scope="module")
def images() -> sources.Source:
    return sources.synthetic(count=24, num_classes=3, size=None, seed=0, quality=90)


@pytest.fixture(scope="module")
def written(images, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("shards") / "out"
    done = write(images, folder, samples_per_shard=6, progress=False)
    assert done.counts == (6, 6, 6, 6) and done.samples == 24
    return folder


def test_image_shards_read_back_as_the_tutorial_pipeline_reads_the_files(images, written):
    """Same bytes, same decode, same transforms: the same tensors and classes, in some
    order."""
    manifest = json.loads((written / MANIFEST).read_text())
    assert manifest["kind"] == "images" and manifest["classes"] == list(images.classes)
    from_files = tutorial_dataset(images, recipes.from_config(EVAL))
    expected = Counter((_digest(x), y) for x, y in from_files)
    shards = Shards(written, recipe="center_crop_eval", crop_size=32, shuffle_buffer=4)
    assert len(shards) == 24
    assert Counter((_digest(x), y) for x, y in shards) == expected


def test_two_workers_read_each_sample_once(written):
    shards = Shards(written, recipe="center_crop_eval", crop_size=32)
    loader = DataLoader(shards, batch_size=None, num_workers=2)
    digests = [_digest(x) for x, _ in loader]
    assert len(digests) == 24 == len(set(digests))


@pytest.mark.parametrize(
    "target", ["userdata_example.Spectrograms", "userdata_example.ToneStream"]
)
def test_a_dataset_of_your_own_is_written_and_read_as_it_was(target, tmp_path):
    """A map-style Dataset (whose index never runs out) by its length; a stream once."""
    data, _ = UserData.inspect(target, {"count": 10}, None)
    done = write(data, tmp_path / "own", samples_per_shard=4, progress=False)
    assert done.counts == (4, 4, 2)
    dataset, _ = data.open()
    given = iter(dataset) if data.iterable else (dataset[i] for i in range(len(dataset)))
    read = list(Shards(tmp_path / "own", shuffle_buffer=0))
    # the same samples (varied lengths, labels) as the Dataset gives them, in some order
    assert Counter((_digest(x), int(y)) for x, y in read) == Counter(
        (_digest(x), int(y)) for x, y in given
    )


def test_a_folder_that_is_not_empty_or_has_no_shards_is_refused(written, tmp_path):
    with pytest.raises(UsageError, match="is not empty"):
        write(sources.synthetic(count=4, num_classes=2), written)
    with pytest.raises(UsageError, match="python -m autotune.shard"):
        Shards(tmp_path)


@pytest.mark.slow
def test_two_ranks_of_two_workers_read_disjoint_shares_covering_every_sample_each_epoch(
    written, tmp_path
):
    torchrun(Path(__file__).with_name("shards_reader.py"), 2, str(written), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    everything = {_digest(x) for x, _ in Shards(written, recipe="center_crop_eval", crop_size=32)}
    for epoch in (0, 1):
        zero, one = (r["epochs"][epoch] for r in ranks)
        assert len(zero) == len(set(zero)) and len(one) == len(set(one))  # once each
        assert not set(zero) & set(one) and set(zero) | set(one) == everything
    assert [r["length"] for r in ranks] == [12, 12]  # each rank's share, as len() says
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # another order each epoch


@pytest.mark.slow
def test_the_shard_command_writes_shards_and_refuses_bad_input_in_one_line(
    tmp_path, monkeypatch, capsys
):
    done = run_python(  # the real command, as a user runs it
        ["-m", "autotune.shard", "dataset.count=12", "out=out", "samples_per_shard=5"],
        tmp_path,
        timeout=120,
        env=env_with_tests(),
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 12 samples in 3 shards" in done.stdout
    assert len(Shards(tmp_path / "out")) == 12
    # its bad input, through the same main() in this process (no interpreter to start)
    monkeypatch.chdir(tmp_path)
    for bad, says in (([], "out is not set"), (["out=out"], "is not empty")):
        assert shard.main(["dataset.count=12", *bad]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_study_of_two_ranks_reads_shards_as_a_dataset_of_your_own(written, tmp_path):
    """The tuner reads shards as a stream of your own: each rank its share (RANK and
    WORLD_SIZE set as torchrun sets them), each worker its share of the rank's."""
    args = [
        *QUICK,
        "study.n_trials=3",
        "ranks=2",
        "dataset._target_=autotune.pipeline.shards.Shards",
        f"dataset.kwargs.root={written}",
        "dataset.kwargs.crop_size=64",
    ]
    done = run_cli(args, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    best = yaml.safe_load((tmp_path / "studies/shards-tiny/best.yaml").read_text())
    assert best["ranks"] == 2 and best["loader"]["num_workers"] <= 2  # the quick space's most


def test_the_shuffle_buffer_s_memory_is_known_before_any_worker_reads(written, images):
    encoded = sum(os.path.getsize(p) for p in images.paths) / len(images)
    data = UserData.check(
        "autotune.pipeline.shards.Shards", {"root": str(written), "shuffle_buffer": 100}
    )
    # 100 records of the shards' mean size: each file's bytes, its tar headers and padding
    assert encoded * 100 < data.buffer_bytes < (encoded + 8192) * 100
    default = UserData.check("autotune.pipeline.shards.Shards", {"root": str(written)})
    assert default.buffer_bytes == pytest.approx(data.buffer_bytes * 10, abs=10)  # 1000
