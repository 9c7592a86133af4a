"""The user's own Dataset by name: checked once (each bad input one line naming the class and
the fix), built in the process that reads it, read as it is in real DataLoader workers."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from autotune.errors import UsageError
from autotune.pipeline import loader, recipes
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.user_data import UserData
from autotune.schema import RecipeConfig

SPECS = "userdata_example.Spectrograms"


def test_a_checked_dataset_knows_its_length_and_classes() -> None:
    data = UserData.check(SPECS, {"count": 12}, None)
    assert (len(data), data.classes) == (12, ("tone0", "tone1", "tone2", "tone3"))
    assert data.describe() == "userdata_example.Spectrograms(count=12)"
    assert data.build() is not data.build()  # built anew where it is read
    factory = UserData.check("userdata_example.spectrograms", {"count": 6})
    assert len(factory) == 6  # a factory function is a target too
    assert data.fingerprint() != UserData.check(SPECS, {"count": 13}).fingerprint()


@pytest.mark.parametrize(
    ("target", "kwargs", "collate", "expected"),
    [
        ("nowhere.Data", {}, None, "dataset._target_=nowhere.Data cannot be imported (No "),
        ("userdata_example.Broken", {}, None, "RuntimeError: no such folder: /nowhere"),
        ("userdata_example.ToneStream", {"count": 8, "split": False}, None, "once per DataLoader"),
        ("userdata_example.NotADataset", {}, None, "not a Dataset (__getitem__ and __len__,"),
        (SPECS, {"vary": True}, None, "cannot be batched (RuntimeError"),
        (SPECS, {"vary": True}, "nowhere.pad", "dataset.collate_fn=nowhere.pad cannot be"),
        (SPECS, {"count": 1}, None, "has 1 samples: it needs 2+"),
        (SPECS, {"colour": "red"}, None, "unexpected keyword argument 'colour'"),
    ],
)
def test_each_bad_dataset_is_one_line_naming_the_fix(
    target: str, kwargs: dict, collate: str | None, expected: str
) -> None:
    with pytest.raises(UsageError) as info:
        UserData.check(target, kwargs, collate)
    message = str(info.value)
    assert expected in message and "\n" not in message, message


def test_the_dataset_is_read_as_it_is_with_its_collate_in_real_workers() -> None:
    data = UserData.check(SPECS, {"count": 16, "vary": True}, "userdata_example.pad_collate")
    config = PipelineConfig(batch_size=4, num_workers=2, prefetch_factor=2, decoder="as_is")
    recipe = recipes.from_config(RecipeConfig())
    built = loader.build(data, config, recipe=recipe, sampler=list(range(16)))
    batches = list(built)
    assert len(batches) == 4
    specs, labels = batches[0]
    assert specs.shape[:2] == (4, 1) and specs.dtype == torch.float32
    assert labels.tolist() == [0, 1, 2, 3]
    expected = data.build()[2][0]
    assert torch.equal(specs[2, :, :, : expected.shape[-1]], expected)  # padded, else as is
    with pytest.raises(UsageError, match="read as it is"):
        loader.build(data, PipelineConfig(batch_size=4, decoder="pil"), recipe=recipe)


def test_build_loader_reads_a_dataset_object_as_it_is_with_its_collate(tmp_path) -> None:
    """What a user's script does with the best.yaml of their own Dataset."""
    from userdata_example import Spectrograms, pad_collate

    import autotune
    from autotune.pipeline import best_file

    as_is = PipelineConfig(batch_size=4, num_workers=1, prefetch_factor=2, decoder="as_is")
    path = tmp_path / "best.yaml"
    best_file.write(path, best_file.BestFile(as_is, as_is=as_is))
    threads = torch.get_num_threads()
    try:
        built = autotune.build_loader(
            Spectrograms(count=8, vary=True), path, collate_fn=pad_collate
        )
        specs, labels = next(iter(built))
    finally:
        torch.set_num_threads(threads)
    assert specs.shape[:2] == (4, 1) and labels.shape == (4,)


def test_a_stream_that_splits_by_worker_is_read_endlessly_each_worker_its_share() -> None:
    data, batch = UserData.inspect("userdata_example.ToneStream", {"count": 12})
    assert (data.iterable, len(data)) == (True, 12)  # its length from its samples
    assert batch[0].shape[0] == 2  # its first two samples, batched
    config = PipelineConfig(batch_size=3, num_workers=2, prefetch_factor=1, decoder="as_is")
    recipe = recipes.from_config(RecipeConfig())
    once = [labels.tolist() for _, labels in loader.build(data, config, recipe=recipe)]
    # one epoch: each of the 12 clips once (labels cycle through 4 classes), in 4 batches
    assert sorted(sum(once, [])) == sorted(i % 4 for i in range(12)) and len(once) == 4
    endless = iter(loader.build(data, config, recipe=recipe, repeat=True))
    assert sum(len(next(endless)[1]) for _ in range(12)) == 36  # three epochs' worth, no end


def test_a_dataset_workers_cannot_get_is_one_line(monkeypatch) -> None:
    """Workers started by spawn (or forkserver) get the Dataset pickled."""
    target = "userdata_example.Locked"
    assert len(UserData.check(target, {})) == 8  # forked workers share it: no pickling
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda: "spawn")
    with pytest.raises(UsageError) as info:
        UserData.check(target, {})
    message = str(info.value)
    assert message.startswith(f"dataset._target_={target} cannot be pickled to DataLoader work")
    assert "open files and handles lazily, in __getitem__" in message and "\n" not in message


def test_an_object_is_read_from_a_copy_and_goes_to_the_trials_as_it_was() -> None:
    """A Dataset object opening its handle lazily: checking it reads a copy, so the object
    the trials get is still the unread, picklable one."""
    from userdata_example import LazyHandle

    lazy = LazyHandle(count=8)
    data, batch = UserData.inspect("userdata_example.LazyHandle", {}, instance=lazy)
    assert data.instance is lazy and not hasattr(lazy, "handle") and batch[0].shape[0] == 2
    assert data.fingerprint() == data.fingerprint()  # its state hashes: it still pickles


def test_a_stream_without_a_length_is_counted() -> None:
    data = UserData.check("userdata_example.ToneStream", {"count": 6, "sized": False})
    assert len(data) == 6
