"""The one-ahead order behind device_prefetch (the side stream itself needs CUDA)."""

from __future__ import annotations

from autotune.pipeline import side_stream


def test_one_ahead_starts_the_next_item_before_handing_over_this_one() -> None:
    events: list[str] = []

    def start(item: int) -> int:
        events.append(f"start {item}")
        return item

    def finish(item: int) -> int:
        events.append(f"finish {item}")
        return item

    for item in side_stream.one_ahead(range(3), start, finish):
        events.append(f"use {item}")
    assert events == [
        "start 0",
        "finish 0",
        "start 1",
        "use 0",
        "finish 1",
        "start 2",
        "use 1",
        "finish 2",
        "use 2",
    ]
    assert list(side_stream.one_ahead([], start, finish)) == []
