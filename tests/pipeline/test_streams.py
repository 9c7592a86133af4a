"""Tests for autotune.pipeline.streams: an iterable's epoch length, read by real DataLoader
workers, and the streams refused in one line (read once per worker, or never ending)."""

from __future__ import annotations

import cProfile
import itertools
import sys

import pytest
import torch
from torch.utils.data import IterableDataset, get_worker_info

from autotune.errors import UsageError
from autotune.pipeline.streams import asks_its_share, epoch_length


class Split(IterableDataset):
    """Each worker reads its own share of ``count`` samples."""

    def __init__(self, count: int, stated: int | None = None) -> None:
        self.count, self.stated = count, stated

    def __iter__(self):
        info = get_worker_info()
        share = range(self.count)
        if info is not None:
            share = itertools.islice(share, info.id, None, info.num_workers)
        return (torch.tensor(i) for i in share)

    def __len__(self) -> int:
        if self.stated is None:
            raise TypeError("no length")
        return self.stated


class Endless(IterableDataset):
    def __iter__(self):
        return (torch.tensor(i) for i in itertools.count())


def test_an_epoch_is_counted_or_its_stated_length() -> None:
    assert epoch_length("data", Split(10)) == 10
    assert epoch_length("data", Split(10, stated=10)) == 10


def test_an_endless_stream_is_refused_in_one_line_not_read_forever() -> None:
    with pytest.raises(UsageError, match=r"data did not end an epoch \(\d+ samples in 1 s"):
        epoch_length("data", Endless(), endless_after_s=1.0)


def test_a_stream_longer_than_it_says_is_refused() -> None:
    with pytest.raises(UsageError, match="did not end an epoch .more than 5 samples"):
        epoch_length("data", Split(8, stated=5))


class Whole(IterableDataset):
    """Every sample in each reader: a stream that does not split by worker."""

    def __iter__(self):
        yield from (torch.tensor(i) for i in range(4))


class OneShot(IterableDataset):
    """A stream whose ``iter()`` is always the same iterator: a sample read is a sample lost."""

    def __init__(self) -> None:
        self.samples = iter(range(4))

    def __iter__(self):
        return self.samples


class Broken(IterableDataset):
    def __iter__(self):
        raise OSError("the bucket is not there")


def test_a_stream_that_asks_get_worker_info_as_it_starts_is_told_from_one_that_does_not() -> None:
    assert asks_its_share(Split(10)) is True
    assert asks_its_share(Whole()) is False
    assert sys.getprofile() is None  # its own watch taken down


class ItsOwnIterator(IterableDataset):
    """A stream that is its own iterator, starting over at each ``iter()``."""

    def __init__(self) -> None:
        self.at = 0

    def __iter__(self):
        self.at = 0
        return self

    def __next__(self) -> int:
        if self.at == 4:
            raise StopIteration
        self.at += 1
        return self.at - 1


def test_where_it_cannot_tell_without_taking_a_sample_from_the_loop_it_says_so() -> None:
    one_shot = OneShot()
    assert asks_its_share(one_shot) is None
    assert list(one_shot) == [0, 1, 2, 3]  # nothing taken from it
    assert asks_its_share(Broken()) is None  # the loop raises it, as torch's would
    reading = ItsOwnIterator()
    samples = iter(reading)
    assert next(samples) == 0 and asks_its_share(reading) is None
    assert [next(samples) for _ in range(3)] == [1, 2, 3]  # the loop's pass, not started over


class Cursor(IterableDataset):
    """A stream that keeps its place on itself: a pass started anew resets one under way."""

    def __iter__(self):
        self.at = 0
        while self.at < 4:
            self.at += 1
            yield self.at - 1


def test_a_pass_under_way_over_a_stream_that_keeps_its_place_on_itself_is_untouched() -> None:
    """The loop reads its pass in the training process (no workers) while the check runs:
    it used to start the stream itself again, and the pass repeated a sample."""
    cursor = Cursor()
    samples = iter(cursor)
    assert [next(samples), next(samples)] == [0, 1]
    assert asks_its_share(cursor) is False
    assert list(samples) == [2, 3]


def _own_profile(frame, event, arg) -> None:  # a profile function of the user's
    return None


@pytest.mark.parametrize("profiler", ["cProfile", "a function"])
def test_under_a_profiler_it_says_it_cannot_tell_and_leaves_the_profiler_in_place(profiler):
    if profiler == "cProfile":  # its hook is no function sys.setprofile could put back
        profile = cProfile.Profile()
        start, stop = profile.enable, profile.disable
    else:
        profile = _own_profile
        start, stop = (lambda: sys.setprofile(_own_profile)), (lambda: sys.setprofile(None))
    start()
    try:
        assert asks_its_share(Split(10)) is None
        watching = sys.getprofile()
    finally:
        stop()
    assert watching is profile
