"""The stages of the user's own Dataset, timed as a worker runs them: its read whole, then its
collate; a read that waits shows as wall time above its CPU time."""

from __future__ import annotations

import pytest

from autotune.pipeline.user_data import UserData
from autotune.runtime.own_stages import OWN_STAGES, profile_own


def own(target: str, **kwargs: object) -> UserData:
    collate = "userdata_example.pad_collate" if kwargs.pop("padded", False) else None
    return UserData.check(f"userdata_example.{target}", kwargs, collate)


def test_each_read_and_each_collate_are_timed_on_the_drawn_samples() -> None:
    profile = profile_own(own("Spectrograms", count=20, vary=True, padded=True), 12, 5)
    assert profile.own_dataset and tuple(profile.stages) == OWN_STAGES
    assert len(profile.samples) == 12 and len({s.path for s in profile.samples}) == 12
    read = profile.stages["getitem"]
    assert 0 < read.cpu_s <= read.wall_s * 1.5  # stft on the CPU: CPU time about wall time
    assert profile.stages["collate"].wall_s > 0
    # per sample: the whole read, its own figure for the tail
    assert sum(s.load_s for s in profile.samples) / 12 == pytest.approx(read.wall_s)
    assert profile.cpu_work_bound(2) == pytest.approx(2 / profile.cpu_s())


def test_a_read_that_waits_shows_as_wall_time_above_cpu_time() -> None:
    profile = profile_own(own("WaitingReads", count=8, wait_ms=20.0), 6, 3)
    read = profile.stages["getitem"]
    assert read.wall_s >= 0.02 and read.cpu_s < read.wall_s / 2


def test_a_stream_is_timed_from_its_first_samples_and_may_end_early() -> None:
    profile = profile_own(own("ToneStream", count=10), 64, 4, warmup=2)
    assert [s.path for s in profile.samples][:2] == [
        "sample 0 of the stream",
        "sample 1 of the stream",
    ]
    assert len(profile.samples) == 8  # 10 in the stream, 2 read untimed first
