"""Tests for autotune.online.loader: ``autotune.DataLoader`` gives the loop exactly what
torch's DataLoader gives with the same arguments and generator, while its settings switch
between batches (real workers, started and shut down at each switch); it refuses what torch
refuses, the same way; a switch whose workers really crash falls back and loses nothing."""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import multiprocessing
import os
import pickle
import random
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    get_worker_info,
)

import autotune
from autotune.machine import detect
from autotune.online import threads
from autotune.pipeline.config import AS_IS, PipelineConfig

N = 50  # samples
# a switch to random settings every few batches: 35-60 a case over these epochs, every
# worker count met (each switch starts the new setting's workers: the time goes there)
SWITCHED_EPOCHS = 20

# switched by the test alone: autotune.DataLoader with its explorer off
Manual = functools.partial(autotune.DataLoader, tune=False)


class Indices(Dataset):
    """Sample i is i: what the loop receives names the indices read."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> int:
        return index


class Stream(IterableDataset):
    """0..N-1 once per pass, each worker its own share (the docs' way of sharding)."""

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        share, of = (info.id, info.num_workers) if info else (0, 1)
        return iter(range(share, N, of))


class CrashesUnderThreeWorkers(Indices):
    """A worker really dies (SIGKILL) when the loader runs three: settings that fail."""

    def __getitem__(self, index: int) -> int:
        info = get_worker_info()
        if info is not None and info.num_workers == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return index


def settings(workers: int, prefetch: int = 2, persistent: bool = False) -> PipelineConfig:
    return PipelineConfig(
        decoder=AS_IS,
        num_workers=workers,
        prefetch_factor=prefetch if workers else None,
        persistent_workers=persistent and workers > 0,
    )


SETTINGS = [settings(w, pf, p) for w in range(5) for pf in (1, 2, 4) for p in (False, True)]

Make = Callable[[type], torch.utils.data.DataLoader]


def epochs_of(
    loader: torch.utils.data.DataLoader,
    epochs: int,
    *,
    switch_every: tuple[int, int] | None = None,
    before_epoch: Callable[[int], None] = lambda epoch: None,
    seed: int = 0,
) -> list[list[list[int]]]:
    """Every batch of every epoch as lists of indices; with ``switch_every`` a switch to
    random settings after every few batches (drawn from the range)."""
    rng = random.Random(seed)
    out = []
    for epoch in range(epochs):
        before_epoch(epoch)
        batches = []
        until = rng.randint(*switch_every) if switch_every else -1
        for batch in loader:
            batches.append(batch.tolist() if torch.is_tensor(batch) else [batch])
            until -= 1
            if until == 0:
                loader.switch(rng.choice(SETTINGS))  # type: ignore[attr-defined]
                until = rng.randint(*switch_every)  # type: ignore[misc]
        out.append(batches)
    return out


def seeded(seed: int = 7) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


CASES: dict[str, Make] = {
    "shuffle": lambda cls: cls(Indices(), batch_size=4, shuffle=True, generator=seeded()),
    "shuffle, drop_last, persistent workers": lambda cls: cls(
        Indices(),
        batch_size=4,
        shuffle=True,
        drop_last=True,
        generator=seeded(),
        num_workers=2,
        persistent_workers=True,
    ),
    "a batch_sampler": lambda cls: cls(
        Indices(),
        batch_sampler=BatchSampler(RandomSampler(range(N), generator=seeded(3)), 6, False),
    ),
    "no automatic batching": lambda cls: cls(
        Indices(), batch_size=None, shuffle=True, generator=seeded()
    ),
}


@pytest.mark.slow  # some hundred loaders' workers started and shut down
@pytest.mark.parametrize("case", sorted(CASES))
def test_switching_every_few_batches_gives_torchs_batches_in_torchs_order(case) -> None:
    make = CASES[case]
    expected = epochs_of(make(torch.utils.data.DataLoader), SWITCHED_EPOCHS)
    loader = make(Manual)
    # a batch of one sample without automatic batching: fewer switches per batch
    every = (2, 6) if "no auto" not in case else (8, 20)
    got = epochs_of(loader, SWITCHED_EPOCHS, switch_every=every)
    assert got == expected
    for epoch in got:  # each index at most once an epoch, every one where nothing is dropped
        counts = Counter(i for batch in epoch for i in batch)
        assert set(counts.values()) == {1}
    mid_epoch = [s for s in loader.switches if s.at_batch > 0]
    assert len(mid_epoch) > 30, len(mid_epoch)  # the switches happened, between batches
    assert {s.settings.num_workers for s in loader.switches} == set(range(5))


@pytest.mark.slow
def test_a_distributed_sampler_of_two_replicas_switching_covers_the_data_once_an_epoch() -> None:
    def make(cls: type, rank: int) -> Any:
        sampler = DistributedSampler(range(N + 2), num_replicas=2, rank=rank, seed=5)
        return cls(Indices(), batch_size=4, sampler=sampler), sampler

    for rank in (0, 1):
        reference, ref_sampler = make(torch.utils.data.DataLoader, rank)
        loader, sampler = make(Manual, rank)
        expected = epochs_of(reference, SWITCHED_EPOCHS, before_epoch=ref_sampler.set_epoch)
        got = epochs_of(
            loader, SWITCHED_EPOCHS, switch_every=(3, 6), before_epoch=sampler.set_epoch
        )
        assert got == expected  # set_epoch reaches the sampler: each epoch its own order
        assert got[0] != got[1]


def test_quick_switches_lose_and_repeat_nothing() -> None:
    """The fast lane's share of the above: two epochs, workers 0-2."""
    make = CASES["shuffle"]
    expected = epochs_of(make(torch.utils.data.DataLoader), 2)
    loader = make(Manual)
    rng = random.Random(1)
    got = []
    for _ in range(2):
        got.append([])
        for index, batch in enumerate(loader):
            got[-1].append(batch.tolist())
            if index % 4 == 1:
                loader.switch(settings(rng.choice([0, 1, 2]), persistent=rng.random() < 0.5))
    assert got == expected
    assert loader.switches


def test_a_stream_switches_at_the_next_epoch_and_reads_each_item_once() -> None:
    loader = Manual(Stream(), batch_size=4)
    first = []
    for index, batch in enumerate(loader):
        first += batch.tolist()
        if index == 1:
            loader.switch(settings(2))
            assert loader.settings.num_workers == 0  # not mid-stream
    second = [i for batch in loader for i in batch.tolist()]
    assert sorted(first) == sorted(second) == list(range(N))
    assert [(s.epoch, s.at_batch, s.settings.num_workers) for s in loader.switches] == [(2, 0, 2)]


@pytest.mark.parametrize("persistent", [False, True])
def test_a_switch_asked_past_an_epoch_s_last_batch_starts_no_workers_for_nothing(persistent):
    """Workers that do not persist would start there, find no batch left, shut down and
    start again as the next epoch begins: the switch waits for it. Workers that persist
    start there and read the next epoch."""
    loader = Manual(Indices(), batch_size=10)
    for index, _ in enumerate(loader):
        if index == len(loader) - 1:
            loader.switch(settings(2, persistent=persistent))
    assert sorted(i for b in loader for i in b.tolist()) == list(range(N))
    made = [(s.epoch, s.at_batch, s.settings.num_workers) for s in loader.switches]
    assert made == ([(1, 5, 2)] if persistent else [(2, 0, 2)])


def test_a_stream_with_no_length_is_fingerprinted_for_its_record() -> None:
    from autotune.online.job_record import job_fingerprint

    loader = autotune.DataLoader(Stream(), batch_size=4)
    assert len(job_fingerprint(loader, detect(want_cuda=False))) == 12


def test_out_of_order_delivery_switches_at_the_next_epoch() -> None:
    loader = Manual(Indices(), batch_size=5, num_workers=2, in_order=False)
    assert not loader.switches_mid_epoch
    seen = []
    for index, batch in enumerate(loader):
        seen += batch.tolist()
        if index == 0:
            loader.switch(settings(1))
    assert sorted(seen) == list(range(N))
    assert loader.settings.num_workers == 2
    assert sorted(i for b in loader for i in b.tolist()) == list(range(N))
    assert loader.settings.num_workers == 1


class Draws(Indices):
    """Sample i: i, its worker's seed, and a random draw (an augmentation's crop, say)."""

    def __getitem__(self, index: int) -> tuple[int, int, float]:
        info = get_worker_info()
        return index, info.seed if info else -1, torch.rand(()).item()


def test_its_workers_are_seeded_as_torch_s_are_with_the_same_generator() -> None:
    def seeds(cls: Callable[..., Any]) -> list[set[int]]:
        loader = cls(Draws(), batch_size=5, num_workers=2, generator=seeded())
        return [{int(s) for _, epoch_seeds, _ in loader for s in epoch_seeds} for _ in range(2)]

    torch_s = seeds(torch.utils.data.DataLoader)
    assert seeds(Manual) == torch_s and len(set.union(*torch_s)) == 4  # 2 workers, 2 epochs


def test_workers_a_switch_starts_draw_afresh_never_replaying_the_epoch_s_draws() -> None:
    """Each loader an epoch switches to seeds its workers apart from the epoch's first:
    workers seeded alike would repeat the same augmentation within an epoch."""
    loader = Manual(Draws(), batch_size=2, num_workers=2, generator=seeded())
    for epoch in range(2):
        draws = []
        for index, (_, _, drawn) in enumerate(loader):
            draws += drawn.tolist()
            if index % 2 == 1:  # a switch every two batches: workers started afresh
                workers = 1 if loader.settings.num_workers == 2 else 2
                loader.switch(settings(workers, persistent=epoch == 1))
        assert len(set(draws)) == len(draws) == N
    loader.release()  # its kept workers down now, not in a later test's time


def test_len_and_main_threads_follow_the_settings() -> None:
    loader = Manual(Indices(), batch_size=4, drop_last=True)
    assert len(loader) == len(torch.utils.data.DataLoader(Indices(), batch_size=4, drop_last=True))
    before = torch.get_num_threads()
    loader.switch(dataclasses.replace(settings(0), main_threads=1))
    try:
        it = iter(loader)
        next(it)
        assert torch.get_num_threads() == 1
        loader.switch(settings(0))  # main_threads None: the count the run had
        next(it)
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)


def test_a_loader_gone_leaves_your_threads_and_one_made_anew_reads_them_as_your_own() -> None:
    """A loop that makes its loader anew each epoch, or evaluates after training: the
    count a loader set is not the process's once it is gone, nor another loader's own."""
    before = torch.get_num_threads()
    loader = Manual(Indices(), batch_size=4)
    loader.switch(dataclasses.replace(settings(0), main_threads=before + 1))
    try:
        assert sum(1 for _ in loader) == len(loader)
        assert torch.get_num_threads() == before + 1
        anew = Manual(Indices(), batch_size=4)  # made while the first one's count is in place
        assert sum(1 for _ in anew) == len(anew)
        assert anew.own.main_threads == before
        del loader, anew
        gc.collect()
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("workers", [0, 1])
def test_until_a_switch_changes_them_the_process_s_threads_are_left_as_the_user_sets_them(
    workers,
) -> None:
    before = torch.get_num_threads()
    loader = Manual(Indices(), batch_size=4, num_workers=workers)
    try:
        for threads in (1, 3):  # after the loader was made, then between epochs
            torch.set_num_threads(threads)
            assert sum(1 for _ in loader) == len(loader) and torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


def test_a_pass_made_and_dropped_before_its_first_batch_leaves_the_switch_to_the_next():
    """`iter(loader)` dropped before it was read: the next pass makes the switch asked for.
    The dropped pass used to take it and lose it (and a run that tunes, stuck on the old
    settings, to ignore every reading of them)."""
    loader = Manual(Indices(), batch_size=4)
    loader.switch(settings(1))
    iter(loader)  # made, never read
    assert sum(1 for _ in loader) == len(loader) and loader.settings.num_workers == 1


def test_two_loaders_in_one_loop_each_read_with_their_own_threads(monkeypatch) -> None:
    """Training reads with one thread, validation with two (each a setting its loader
    tuned), one epoch of each in turn: each epoch runs with its own loader's count. The
    training's used to run with whatever the validation had set last."""
    monkeypatch.setattr(threads, "_last_set", None)
    before = torch.get_num_threads()
    train, val = Manual(Indices(), batch_size=4), Manual(Indices(), batch_size=4)
    seen: dict[str, set[int]] = {"train": set(), "val": set()}

    def epoch(loader: autotune.DataLoader, name: str) -> None:
        seen[name].update(torch.get_num_threads() for _ in loader)

    try:
        torch.set_num_threads(2)
        train.switch(dataclasses.replace(settings(0), main_threads=1))
        val.switch(dataclasses.replace(settings(0), main_threads=2))
        for _ in range(2):
            epoch(train, "train")
            epoch(val, "val")
        assert seen == {"train": {1}, "val": {2}}
    finally:
        torch.set_num_threads(before)


def test_a_switch_whose_workers_crash_falls_back_and_loses_nothing(caplog) -> None:
    loader = Manual(CrashesUnderThreeWorkers(), batch_size=4, shuffle=True, generator=seeded())
    expected = epochs_of(
        torch.utils.data.DataLoader(Indices(), batch_size=4, shuffle=True, generator=seeded()), 1
    )
    got = []
    with caplog.at_level(logging.WARNING, logger="autotune"):
        for index, batch in enumerate(loader):
            got.append(batch.tolist())
            if index == 2:
                loader.switch(settings(1))
            if index == 4:
                loader.switch(settings(3))  # a worker dies: back to one worker
    assert [got] == expected
    assert [(s.settings.num_workers, s.fell_back) for s in loader.switches] == [
        (1, False),
        (3, False),
        (1, True),
    ]
    assert "w3 pf2 as_is" in caplog.text and "back to w1" in caplog.text
    assert loader.settings.num_workers == 1


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker")  # torch's
def test_your_own_workers_dying_raise_as_torch_s_and_are_not_a_loop_that_leaves(
    tmp_path, caplog
) -> None:
    """Nothing worked before your settings: torch's error, each epoch. A loop that catches
    it and goes on to the next epoch has not left its epochs early by its own shape."""
    loader = autotune.DataLoader(
        CrashesUnderThreeWorkers(),
        batch_size=4,
        num_workers=3,
        storage=f"sqlite:///{tmp_path}/a.db",
    )
    with caplog.at_level(logging.INFO, logger="autotune"):
        for _ in range(3):
            with pytest.raises(RuntimeError, match="DataLoader worker"):
                sum(1 for _ in loader)
    assert loader.passes.left_after == 0
    assert "could not be timed" not in caplog.text


class StreamDiesMidPassUnderThreeWorkers(IterableDataset):
    """Stream's items; with three workers, one really dies (SIGKILL) after its first items."""

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        share, of = (info.id, info.num_workers) if info else (0, 1)
        for count, item in enumerate(range(share, N, of)):
            if of == 3 and share == 1 and count == 6:
                os.kill(os.getpid(), signal.SIGKILL)
            yield item


@pytest.mark.slow  # a worker really killed; the others collected as torch collects them
def test_a_stream_s_workers_dying_mid_pass_raise_as_torch_s_would_never_repeating_items() -> None:
    # the switch came at the epoch's start; a stream read again from its start would repeat
    # what the loop already has, so past the first batch there is nothing to fall back to
    loader = Manual(StreamDiesMidPassUnderThreeWorkers(), batch_size=2)
    assert sorted(i for b in loader for i in b.tolist()) == list(range(N))
    loader.switch(settings(3))
    seen: list[int] = []
    # torch's own error: the worker's death, or the connection its batch's shared memory is
    # fetched through reset or closed as it reads (the worker killed as the batch crossed)
    with pytest.raises((RuntimeError, ConnectionResetError, EOFError)):
        for batch in loader:
            seen += batch.tolist()
    assert seen and len(seen) == len(set(seen))  # what it delivered, each item once


def _epoch_switched_after_one_batch(loader: autotune.DataLoader, to: PipelineConfig) -> None:
    """An epoch read with a switch to ``to`` after its first batch."""
    batches = iter(loader)
    next(batches)
    loader.switch(to)
    for _ in batches:
        pass


@pytest.mark.slow  # torch's workers then take 5 s to be collected, as with torch's own loader
def test_the_datasets_own_error_is_raised_as_torch_raises_it() -> None:
    class Broken(Indices):
        def __getitem__(self, index: int) -> int:
            if index == 7:
                raise ValueError("sample 7 is unreadable")
            return index

    loader = Manual(Broken(), batch_size=4)
    with pytest.raises(ValueError, match="sample 7 is unreadable"):
        _epoch_switched_after_one_batch(loader, settings(1))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 4, "shuffle": True, "sampler": range(N)},
        {"batch_sampler": BatchSampler(range(N), 4, False), "batch_size": 4},
        {"num_workers": -1},
        {"prefetch_factor": 2},
        {"batch_size": 4, "persistent_workers": True},
        {"multiprocessing_context": "fork"},
    ],
)
def test_arguments_torch_refuses_are_refused_the_same_way(kwargs) -> None:
    with pytest.raises(Exception) as theirs:
        torch.utils.data.DataLoader(Indices(), **kwargs)
    with pytest.raises(type(theirs.value)) as ours:
        autotune.DataLoader(Indices(), **kwargs)
    assert str(ours.value) == str(theirs.value)


def _caught(
    loader: torch.utils.data.DataLoader,
    *,
    switch_at: int | None = None,
    error: type[Exception] = ValueError,
) -> list:
    """One epoch, a loop that catches the Dataset's ``error`` and reads on; a switch to one
    worker after ``switch_at`` batches."""
    got, it = [], iter(loader)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return got
        except error as exc:
            got.append(type(exc).__name__)
            continue
        got.append(batch.tolist())
        if len(got) == switch_at:
            loader.switch(settings(1))


class RaisesAtFive(Indices):
    def __getitem__(self, index: int) -> int:
        if index == 5:
            raise ValueError("sample 5 is unreadable")
        return index


def test_a_loop_that_catches_the_dataset_s_error_reads_on_as_with_torch_s_loader() -> None:
    expected = _caught(torch.utils.data.DataLoader(RaisesAtFive(), batch_size=2))
    assert "ValueError" in expected and len(expected) == N // 2
    assert _caught(Manual(RaisesAtFive(), batch_size=2)) == expected
    assert _caught(Manual(RaisesAtFive(), batch_size=2), switch_at=4) == expected  # after it


class OutOfMemoryAtFive(Indices):
    def __getitem__(self, index: int) -> int:
        if index == 5:
            raise MemoryError("sample 5 is too large")
        return index


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loop_that_catches_a_memory_error_of_the_dataset_s_reads_on_to_the_epoch_s_end(
    workers,
) -> None:
    """Where nothing can fall back (no switch), a ``MemoryError`` is raised as torch raises
    it, and the loader moves past its batch as torch's does: the epoch ends as torch's."""

    def caught(cls: Callable[..., torch.utils.data.DataLoader]) -> list:
        loader = cls(OutOfMemoryAtFive(), batch_size=2, num_workers=workers)
        return _caught(loader, error=MemoryError)

    expected = caught(torch.utils.data.DataLoader)
    assert "MemoryError" in expected and len(expected) == N // 2
    assert caught(Manual) == expected


def test_a_main_process_read_error_after_a_switch_is_the_dataset_s_raised_not_fallen_back() -> (
    None
):
    class OSErrorAtSeven(Indices):
        def __getitem__(self, index: int) -> int:
            if index == 7 and get_worker_info() is None:
                raise OSError("transient read error at 7")
            return index

    loader = Manual(OSErrorAtSeven(), batch_size=2, num_workers=1)
    with pytest.raises(OSError, match="transient read error at 7"):
        _epoch_switched_after_one_batch(loader, settings(0))
    assert not [s for s in loader.switches if s.fell_back]


def test_a_timeout_of_the_user_s_with_a_switch_to_no_workers_reads_on() -> None:
    loader = Manual(Indices(), batch_size=4, num_workers=1, timeout=30)
    got = []
    for batch in loader:
        got.append(batch.tolist())
        if len(got) == 2:
            loader.switch(settings(0))  # torch refuses a timeout without workers
    assert got == epochs_of(torch.utils.data.DataLoader(Indices(), batch_size=4), 1)[0]


def test_a_batch_sampler_that_draws_when_iterated_gives_torch_s_batches() -> None:
    """A bucketing batch sampler drawing its order at ``iter()`` from the global generator,
    drawn there before the workers' seed, as torch's iterator draws."""

    class DrawsAtIter(torch.utils.data.Sampler):
        def __len__(self) -> int:
            return N // 5

        def __iter__(self) -> Iterator[list[int]]:
            order = torch.randperm(N).tolist()
            return iter([order[i : i + 5] for i in range(0, N, 5)])

    def batches(cls: type) -> list:
        torch.manual_seed(3)
        loader = cls(Indices(), batch_sampler=DrawsAtIter())
        return [[b.tolist() for b in loader] for _ in range(2)]

    assert batches(Manual) == batches(torch.utils.data.DataLoader)


class LengthUnknown(torch.utils.data.Sampler):
    """A sampler that says it has no length, as a stream's often do."""

    def __iter__(self) -> Iterator[int]:
        return iter(range(N - 1, -1, -1))

    def __len__(self) -> int:
        raise NotImplementedError("length unknown")


class NoLength(torch.utils.data.Sampler):
    def __iter__(self) -> Iterator[int]:
        return iter(range(N - 1, -1, -1))


@pytest.mark.parametrize("sampler", [NoLength, LengthUnknown])
def test_a_sampler_with_no_length_is_read_as_torch_reads_it(sampler) -> None:
    ours = autotune.DataLoader(Indices(), batch_size=8, sampler=sampler(), tune=False)
    theirs = torch.utils.data.DataLoader(Indices(), batch_size=8, sampler=sampler())
    assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]
    with pytest.raises(Exception) as raised:
        len(theirs)
    with pytest.raises(type(raised.value)):
        len(ours)


def test_it_pickles_as_torch_s_does_and_starts_afresh_where_unpickled() -> None:
    loader = Manual(Indices(), batch_size=4, shuffle=True, generator=seeded())
    loader.switch(settings(1, persistent=True))
    assert sorted(i for b in loader for i in b.tolist()) == list(range(N))  # workers kept
    again = pickle.loads(pickle.dumps(loader))
    loader.release()
    assert (again.epochs, again.switches, again.tuning) == (0, [], None)
    assert again.settings.num_workers == 0 and again.tune is False  # its arguments
    theirs = torch.utils.data.DataLoader(Indices(), batch_size=4, shuffle=True, generator=seeded())
    sum(1 for _ in theirs)  # the generator as a whole first epoch left it
    assert [b.tolist() for b in again] == [b.tolist() for b in theirs]


def test_loader_settings_set_before_the_first_epoch_are_read_as_torch_s_loader_reads_them():
    def seeds(cls: Callable[..., Any], persistent: bool) -> set[int]:
        loader = cls(
            Draws(), batch_size=5, num_workers=2, persistent_workers=persistent, generator=seeded()
        )
        loader.num_workers = 0  # to debug in the training process, say
        return {int(s) for _, epoch_seeds, _ in loader for s in epoch_seeds}

    for persistent in (False, True):
        theirs = seeds(torch.utils.data.DataLoader, persistent)
        assert seeds(Manual, persistent) == theirs == {-1}  # no worker's


def test_lightning_s_end_of_fit_shuts_the_kept_workers_down() -> None:
    from lightning.pytorch.utilities.combined_loader import _shutdown_workers_and_reset_iterator

    def workers() -> int:
        return len(multiprocessing.active_children())

    loader = Manual(Indices(), batch_size=4)
    loader.switch(settings(2, persistent=True))
    gc.collect()  # an earlier test's loader, in a cycle, shuts its workers down now, not within
    before = workers()
    assert sum(1 for _ in loader) == len(loader) and workers() == before + 2  # kept alive
    _shutdown_workers_and_reset_iterator(loader)  # as its fetchers' teardown calls it
    assert workers() == before and loader._iterator is None
    assert sorted(i for b in loader for i in b.tolist()) == list(range(N))  # started again
    loader.release()


@pytest.mark.parametrize("yours", [True, False], ids=["your workers", "the tuning's"])
def test_a_pass_whose_kept_workers_are_shut_down_from_outside_reads_on_whole(yours) -> None:
    loader = Manual(Indices(), batch_size=5, num_workers=2 * yours, persistent_workers=yours)
    if not yours:
        loader.switch(settings(2, persistent=True))  # as the tuning keeps them
    it = iter(loader)
    read = [next(it).tolist() for _ in range(3)]
    loader._iterator = None  # as Lightning's teardown shuts them down, mid-pass
    read += [b.tolist() for b in it]
    assert sorted(i for b in read for i in b) == list(range(N))
    loader.release()


@pytest.mark.parametrize("dataset", [Stream(), Indices()], ids=["stream", "in_order=False"])
def test_a_stream_s_pass_whose_kept_workers_are_shut_down_mid_pass_says_so(dataset) -> None:
    """Where the batches cannot be resumed where the workers stood: said, not read twice."""
    loader = Manual(dataset, batch_size=5, in_order=isinstance(dataset, Stream))
    loader.switch(settings(2, persistent=True))  # as the tuning keeps them
    sum(1 for _ in loader)
    it = iter(loader)
    read = [next(it).tolist() for _ in range(3)]
    loader._iterator = None  # as Lightning's teardown shuts them down, mid-pass
    with pytest.raises(RuntimeError, match="cannot resume a pass"):
        read += [b.tolist() for b in it]
    assert sorted(i for b in loader for i in b.tolist()) == list(range(N))  # then on, whole
    loader.release()


@pytest.mark.parametrize(
    "read_with", [None, settings(2), settings(0), settings(3, persistent=True)],
    ids=["yours", "w2 not kept", "w0", "w3 kept"],
)  # fmt: skip
def test_with_workers_you_keep_alive_two_passes_at_once_are_torch_s_one_iterator(
    read_with: PipelineConfig | None,
) -> None:
    """Whatever settings the tuning reads with: yours asked for workers that persist."""

    def two_passes(cls: Callable[..., Any]) -> list:
        loader = cls(Indices(), batch_size=5, num_workers=2, persistent_workers=True)
        if read_with is not None and isinstance(loader, autotune.DataLoader):
            loader.switch(read_with)  # as the tuning reads
        first = iter(loader)
        read = [next(first).tolist()]
        second = iter(loader)  # before the first ended: torch resets its one iterator
        read += [next(second).tolist(), next(iter(loader)).tolist()]  # and a peek
        read += [[b.tolist() for b in first], [b.tolist() for b in second]]
        read.append([b.tolist() for b in loader])  # and the next epoch is whole
        del first, second, loader
        return read

    assert two_passes(Manual) == two_passes(torch.utils.data.DataLoader)


Passes = list[list[list[int]]]  # each pass's batches, as lists of indices


def _zipped(loader: Any) -> Passes:
    pairs = [(a.tolist(), b.tolist()) for a, b in zip(loader, loader, strict=True)]
    return [[a for a, _ in pairs], [b for _, b in pairs]]


def _nested(loader: Any) -> Passes:  # each batch of the outer pass, then a whole inner pass
    outer, inner = [], []
    for a in loader:
        outer.append(a.tolist())
        inner.append([b.tolist() for b in loader])
    return [outer, *inner]


def _opened_late(loader: Any) -> Passes:  # the first pass opens its workers after the second
    first, second = iter(loader), iter(loader)
    read_first, read_second = [next(first).tolist()], [next(second).tolist()]
    read_first.append(next(first).tolist())
    return [read_first + [b.tolist() for b in first], read_second + [b.tolist() for b in second]]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("two_passes", [_zipped, _nested, _opened_late])
def test_two_passes_at_once_over_workers_it_keeps_alive_for_you_are_torch_s_two_passes(
    two_passes: Callable[[Any], Passes], shuffle: bool
) -> None:
    """torch's loader, without workers that persist, gives each pass its own: so does this
    one where the tuning keeps its workers alive, a pass they were taken from reading on with
    workers of its own. Shuffled, each pass is whole (which permutation a pass draws from a
    generator the passes share depends, in torch's too, on how far ahead each reads)."""

    def read(cls: Callable[..., Any], switch: bool) -> Passes:
        generator = torch.Generator().manual_seed(3)
        loader = cls(Indices(), batch_size=5, shuffle=shuffle, generator=generator)
        if switch:
            loader.switch(settings(2, persistent=True))  # as the tuning keeps them
        passes = [[b.tolist() for b in loader]]  # an epoch: its workers kept alive
        passes += [*two_passes(loader), [b.tolist() for b in loader]]  # and the next, whole
        if switch:
            assert loader._iterator is not None  # the kept workers served the last pass
            loader.release()
        return passes

    ours = read(Manual, switch=True)
    assert all(sorted(i for b in one for i in b) == list(range(N)) for one in ours)
    if not shuffle:
        assert ours == read(torch.utils.data.DataLoader, switch=False)


@pytest.mark.parametrize("dataset", [Stream(), Indices()], ids=["stream", "in_order=False"])
def test_two_passes_at_once_of_a_stream_over_workers_it_keeps_alive_are_refused_in_words(
    dataset: Dataset,
) -> None:
    """A stream's pass (or one whose batches come as they are read) cannot go on apart from
    where the kept workers stood: said, not read wrong; then on, whole."""
    in_order = isinstance(dataset, Stream)
    loader = Manual(dataset, batch_size=5, in_order=in_order)
    loader.switch(settings(2, persistent=True))  # as the tuning keeps them, at the next epoch
    sum(1 for _ in loader)
    with pytest.raises(RuntimeError, match="make a second loader"):
        for _ in zip(loader, loader, strict=True):
            pass
    assert sorted(i for b in loader for i in b.tolist()) == list(range(N))
    loader.release()


def test_asked_again_after_its_end_a_pass_stays_ended() -> None:
    loader = Manual(Indices(), batch_size=25)
    it = iter(loader)
    assert len(list(it)) == 2
    for _ in range(3):
        with pytest.raises(StopIteration):
            next(it)
    assert not loader.meter.untimeable  # its end not counted as epochs with nothing timed


class HoldsALambda(Indices):
    """A Dataset a spawned worker cannot be given: it holds a lambda."""

    def __init__(self) -> None:
        self.read = lambda index: index

    def __getitem__(self, index: int) -> int:
        return self.read(index)


def test_a_switch_whose_workers_cannot_start_falls_back_whatever_the_error(caplog) -> None:
    """Workers started by spawn (macOS's default, forkserver from Python 3.14): the Dataset
    must be pickled to them, and this one cannot be, a real error at their start."""
    before = multiprocessing.get_start_method()
    multiprocessing.set_start_method("spawn", force=True)
    try:
        loader = Manual(HoldsALambda(), batch_size=4)
        got = []
        with caplog.at_level(logging.WARNING, logger="autotune"):
            for batch in loader:
                got.append(batch.tolist())
                if len(got) == 2:
                    loader.switch(settings(1))
    finally:
        multiprocessing.set_start_method(before, force=True)
    assert got == epochs_of(torch.utils.data.DataLoader(Indices(), batch_size=4), 1)[0]
    assert [(s.settings.num_workers, s.fell_back) for s in loader.switches] == [
        (1, False),
        (0, True),
    ]
    assert "back to w0" in caplog.text


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 4 workers on 2 CPUs
def test_a_loader_collected_shuts_its_kept_workers_down_before_gc_takes_their_pipes(
    monkeypatch,
) -> None:
    """Workers that persist, two of four never handed an index (an epoch of two batches),
    and a loader collected by gc (a cycle, as a LightningModule's): shut down as the cycle
    was finalized, a worker's first put started a queue thread after gc had marked its pipe
    garbage, and the thread closed a pipe gc had closed ("Bad file descriptor"), or a file
    opened since on the same descriptor. The kept workers are shut down first."""
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    for _ in range(4):  # the race came in 4 runs of 6, a loader each
        loader = Manual(Indices(), batch_size=N // 2, num_workers=4, persistent_workers=True)
        loader.cycle = loader
        assert sum(1 for _ in loader) == 2
        del loader
        gc.collect()
        for thread in threading.enumerate():
            if thread.name == "QueueFeederThread":
                thread.join(timeout=10)
    assert raised == []
