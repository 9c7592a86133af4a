"""Tests for autotune.tuner.tune: what the study's run leaves behind however it ends."""

from __future__ import annotations

import pytest
from helpers import make_session

from autotune.tuner import tune as tune_module
from autotune.tuner.lease import Leases
from autotune.tuner.tune import Stopwatch


def test_the_lease_engine_is_disposed_when_the_run_fails(tmp_path, monkeypatch) -> None:
    session = make_session([f"study.storage=sqlite:///{tmp_path}/a.db", "study.name=s"])
    disposed = []
    real_dispose = Leases.dispose
    monkeypatch.setattr(Leases, "dispose", lambda self: disposed.append(real_dispose(self)))

    def broken(*args, **kwargs):  # the fault: the references' run raises
        raise RuntimeError("the ceiling's run broke")

    monkeypatch.setattr(tune_module, "reference_points", broken)
    with pytest.raises(RuntimeError, match="ceiling's run broke"):
        tune_module.tune(session)
    assert len(disposed) == 1


def test_the_stopwatch_adds_up_each_phase_even_when_it_raises() -> None:
    ticks = iter([0.0, 2.0, 10.0, 13.5, 20.0, 21.0])
    spent = Stopwatch(clock=lambda: next(ticks))
    with spent("search"):
        pass
    with pytest.raises(KeyboardInterrupt), spent("search"):
        raise KeyboardInterrupt  # Ctrl-C in the search: its time still counts
    with spent("confirmation"):
        pass
    assert spent.seconds == {"search": 5.5, "confirmation": 1.0}
