"""What a DataLoader's job is named by: its collate functions, partials too."""

from __future__ import annotations

import functools

from autotune.pipeline.loader_job import collate_name


def test_a_partial_collate_is_named_by_what_it_calls() -> None:
    def pad(samples: list, value: int = 0) -> list:
        return samples

    def trim(samples: list, value: int = 0) -> list:
        return samples

    names = {collate_name(functools.partial(f, value=1)) for f in (pad, trim)}
    assert len(names) == 2 and all(name.startswith("partial(") for name in names)
