"""Tests for autotune.online.passes: how much of each epoch the loop reads."""

from __future__ import annotations

import functools

from torch.utils.data import IterableDataset

import autotune
from autotune.online.passes import Passes


def _left_after(passes: Passes, batches: int) -> int:
    """A pass left after ``batches``: where the loop leaves its epochs now (0: it does not)."""
    for delivered in range(batches):
        passes.asked_for(delivered)
    passes.left()
    return passes.left_after


def test_two_passes_in_a_row_left_at_the_same_batch_make_it_the_loop_s_epoch() -> None:
    passes = Passes()
    assert _left_after(passes, 30) == 0  # one: a peek, perhaps
    assert _left_after(passes, 30) == 30  # a number of steps an epoch
    assert _left_after(passes, 30) == 30
    assert (passes.length(100), passes.timeable(100)) == (30, 29)  # its last step: untimed
    passes.ended(100)  # an epoch read whole
    assert (passes.left_after, passes.length(100), passes.timeable(100)) == (0, 100, 100)


def test_a_loader_made_anew_is_read_to_its_last_batch_and_no_more() -> None:
    """Its reading is taken as the last batch is handed out: that step is never timed, however
    the loop read the one before; a loop that leaves its passes early leaves its passes so."""
    read_to_its_last, peeked, read_whole, left_early = Passes(), Passes(), Passes(), Passes()
    for delivered in range(16):  # Lightning: every batch, and no request after the last
        read_to_its_last.asked_for(delivered)
    peeked.asked_for(0)  # next(iter(loader)), and the loader dropped
    read_whole.ended(16)  # a loop asked past the last batch: the epoch ended
    _left_after(left_early, 10)
    _left_after(left_early, 10)  # ten steps an epoch
    cases = ((read_to_its_last, 16, 15), (peeked, 16, 15), (read_whole, 16, 15))
    for earlier, length, timeable in (*cases, (left_early, 10, 9)):
        anew = Passes()
        anew.follows(earlier, 16)
        assert (anew.length(16), anew.timeable(16)) == (length, timeable)


def test_loaders_made_anew_and_dropped_in_their_passes_leave_them_there() -> None:
    """A loop that reads ten batches of each loader and drops it: the second such loader may
    have followed a peek; from the third, its epochs are ten batches."""
    earlier, lengths = Passes(), []
    for _ in range(3):
        for delivered in range(10):
            earlier.asked_for(delivered)
        anew = Passes()
        anew.follows(earlier, 16)
        lengths.append(anew.length(16))
        earlier = anew
    assert lengths == [16, 10, 10]


def test_the_longest_epoch_read_whole_is_kept_where_epochs_vary() -> None:
    passes = Passes()
    for delivered in (40, 60, 2):  # a bucketing sampler's epochs
        passes.ended(delivered)
    assert passes.longest == 60


def test_a_peek_and_passes_nested_in_one_leave_the_epoch_as_it_is() -> None:
    passes = Passes()
    assert _left_after(passes, 1) == 0  # next(iter(loader))
    passes.ended(16)
    for outer in range(1, 4):  # each batch of an outer pass, then a whole inner pass
        assert _left_after(passes, outer) == 0
        passes.ended(16)
    assert _left_after(passes, 0) == _left_after(passes, 0) == 0  # zip(): nothing asked
    assert passes.left_after == 0


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(64))


def test_a_stream_s_passes_left_early_are_counted_too() -> None:
    loader = functools.partial(autotune.DataLoader, tune=False)(Stream(), batch_size=4)
    for _ in range(3):
        for index, _ in enumerate(loader):
            if index == 4:
                break
    assert loader.passes.left_after == 5 and loader.pass_length == 5
    assert sum(1 for _ in loader) == 16 and loader.passes.left_after == 0
