"""Batches of any shape: every tensor moved, the structure kept, the samples counted."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch

from autotune.pipeline.batches import samples_in, tensors, to_device

Pair = namedtuple("Pair", "inputs labels")


def test_every_tensor_of_a_nested_batch_moves_and_the_structure_stays() -> None:
    batch = {
        "spec": torch.zeros(4, 1, 8, 8),
        "meta": [torch.arange(4), ("clip", torch.ones(4))],
        "pair": Pair(torch.zeros(4, 2), torch.zeros(4)),
        "names": ["a", "b", "c", "d"],
    }
    moved = to_device(batch, torch.device("meta"))
    assert all(t.device.type == "meta" for t in tensors(moved))
    assert len(list(tensors(moved))) == 5
    assert isinstance(moved["meta"][1], tuple) and moved["meta"][1][0] == "clip"
    assert isinstance(moved["pair"], Pair) and moved["names"] == ["a", "b", "c", "d"]
    assert all(t.device.type == "cpu" for t in tensors(batch))  # the input is left alone


@pytest.mark.parametrize(
    ("batch", "samples"),
    [
        ((torch.zeros(6, 3, 4, 4), torch.zeros(6)), 6),  # (inputs, labels)
        ([torch.zeros(6, 3), torch.zeros(6)], 6),  # default_collate's list
        ({"spec": torch.zeros(5, 1, 9), "label": torch.zeros(5)}, 5),
        ({"audio": {"wave": torch.zeros(3, 100)}, "label": torch.zeros(3)}, 3),
        (([torch.zeros(3, 8, 8), torch.zeros(3, 9, 7)], [{"boxes": 1}, {"boxes": 2}]), 2),
        (["caption one", "caption two", "three"], 3),  # a list of samples
        (torch.zeros(7, 2), 7),
    ],
)
def test_the_samples_of_a_batch_are_its_first_field_s_count(batch, samples: int) -> None:
    assert samples_in(batch) == samples


def test_what_is_not_a_batch_is_named() -> None:
    with pytest.raises(ValueError, match="not a batch: int"):
        samples_in(3)
