"""Tests for autotune.online.torch_arguments and ``autotune.DataLoader.from_loader``: a
loader rebuilt from a torch loader's attributes reads the same batches the same way, and a
loader Accelerate prepared tunes once its base loader is rebuilt so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from helpers import BRIEF_WINDOW
from test_explorer import Work
from test_online_loader import Indices, Stream
from torch.utils.data import BatchSampler, RandomSampler

import autotune
from autotune.online.torch_arguments import arguments_of


def _seeded() -> torch.Generator:
    return torch.Generator().manual_seed(7)


LOADERS: dict[str, Callable[[], torch.utils.data.DataLoader]] = {
    "shuffled": lambda: torch.utils.data.DataLoader(
        Indices(), batch_size=8, shuffle=True, drop_last=True, generator=_seeded()
    ),
    "its own batch sampler": lambda: torch.utils.data.DataLoader(
        Indices(), batch_sampler=BatchSampler(RandomSampler(Indices(), generator=_seeded()), 6,
                                              drop_last=False),
    ),
    "no automatic batching": lambda: torch.utils.data.DataLoader(
        Indices(), batch_size=None, shuffle=True, generator=_seeded()
    ),
    "a stream": lambda: torch.utils.data.DataLoader(Stream(), batch_size=8, drop_last=True),
    "workers kept alive": lambda: torch.utils.data.DataLoader(
        Indices(), batch_size=8, shuffle=True, num_workers=2, persistent_workers=True,
        prefetch_factor=3, generator=_seeded(),
    ),
}  # fmt: skip


def _epochs(loader: Any, epochs: int = 2) -> list[list[Any]]:
    return [[b.tolist() if torch.is_tensor(b) else b for b in loader] for _ in range(epochs)]


@pytest.mark.parametrize("made", LOADERS.values(), ids=LOADERS.keys())
def test_a_loader_rebuilt_from_torch_s_reads_the_same_batches_the_same_way(made) -> None:
    original = made()
    rebuilt = autotune.DataLoader.from_loader(original, tune=False)
    assert _epochs(rebuilt) == _epochs(made())
    settings = ("num_workers", "prefetch_factor", "persistent_workers", "batch_size", "drop_last")
    assert all(getattr(rebuilt, name) == getattr(original, name) for name in settings)
    rebuilt.release()


def test_a_batch_sampler_torch_made_is_read_back_as_its_arguments() -> None:
    kwargs = arguments_of(LOADERS["shuffled"]())
    assert (kwargs["batch_size"], kwargs["drop_last"]) == (8, True)
    assert isinstance(kwargs["sampler"], RandomSampler) and "batch_sampler" not in kwargs


@pytest.mark.slow  # a few settings of real workers: seconds
def test_a_loader_accelerate_prepared_tunes_once_its_base_is_rebuilt(tmp_path) -> None:
    """Accelerate builds its own torch loader (``base_dataloader``) from the one it is given:
    rebuilt with ``from_loader``, it tunes, and the loop gets what Accelerate's would give."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)

    def prepared() -> Any:
        loader = torch.utils.data.DataLoader(
            Work(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0)
        )
        return accelerator.prepare(loader)

    plain, tuned = prepared(), prepared()
    tuned.base_dataloader = autotune.DataLoader.from_loader(
        tuned.base_dataloader, tune=3.0, window=BRIEF_WINDOW, storage=f"sqlite:///{tmp_path}/a.db"
    )
    for _ in range(4):
        assert [b.tolist() for b in tuned] == [b.tolist() for b in plain]
    base = tuned.base_dataloader
    assert isinstance(tuned, autotune.DataLoader) and len(tuned) == len(plain) == 48
    assert len({r.settings for r in base.readings}) >= 2, base.readings  # explored on the run
    base.release()
