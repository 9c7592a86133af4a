"""Tests for autotune.online.epoch_batches: batches drawn once, in the sampler's order, and
what a shut-down loader held handed again, first, to the next."""

from __future__ import annotations

from itertools import islice

from autotune.online.epoch_batches import EpochBatches


class CountingSampler:
    """Yields 0..n-1 and counts how far it was drawn."""

    def __init__(self, n: int) -> None:
        self.n, self.drawn = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.drawn += 1
            yield i


def test_draws_as_loaders_ask_and_hands_back_in_the_order_drawn() -> None:
    sampler = CountingSampler(10)
    epoch = EpochBatches(sampler)
    assert sampler.drawn == 0  # nothing drawn before a loader asks
    first = list(islice(epoch.handed(), 4))  # a loader's workers prefetch 0-3
    epoch.delivered()  # the loop got 0
    epoch.take_back()  # 1-3 were in flight
    second = list(islice(epoch.handed(), 2))  # the next loader gets 1, 2 first
    epoch.delivered()
    epoch.take_back()  # 2 in flight again, 3 never re-handed: still in order
    rest = list(epoch.handed())
    for _ in range(len(rest)):
        epoch.delivered()
    assert (first, second, rest) == ([0, 1, 2, 3], [1, 2], [2, 3, 4, 5, 6, 7, 8, 9])
    assert sampler.drawn == 10  # each drawn once
    assert epoch.outstanding == 0
