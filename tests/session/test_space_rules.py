"""The rules a space's knobs keep together, on knobs built by hand (``test_space`` checks
them through whole spaces read from YAML)."""

from __future__ import annotations

import pytest

from autotune.errors import UsageError
from autotune.session.knobs import Condition, Knob
from autotune.session.space_rules import AS_IS_KEEPS, check_decoder_first, check_worker_conditions

WORKERS = Knob("num_workers", "int", low=0, high=2)
DECODER = Knob("decoder", "choice", choices=("as_is", "pil"))
WHEN_WORKERS = Condition.parse("num_workers > 0", "test")


def test_the_choices_as_is_keeps_come_after_the_decoder() -> None:
    assert "decoder" not in AS_IS_KEEPS and "cache" in AS_IS_KEEPS
    check_decoder_first([WORKERS, DECODER])  # what is declared so far: no choice yet
    with pytest.raises(UsageError, match="declare decoder before cache"):
        check_decoder_first([WORKERS, Knob("cache", "choice", choices=("none",))])


def test_a_worker_knob_needs_its_condition_where_no_workers_is_possible() -> None:
    prefetch = Knob("prefetch_factor", "int", low=1, high=4)
    with pytest.raises(UsageError, match='prefetch_factor needs num_workers > 0: add when: "nu'):
        check_worker_conditions([WORKERS, prefetch])
    check_worker_conditions([WORKERS, Knob("prefetch_factor", "int", 1, 4, when=WHEN_WORKERS)])
    # always some workers: no condition needed
    check_worker_conditions([Knob("num_workers", "int", low=1, high=2), prefetch])
    with pytest.raises(UsageError, match="persistent_workers needs num_workers > 0"):
        check_worker_conditions([Knob("persistent_workers", "bool")])  # 0 workers by default
