"""Tests for autotune.online.admission: a setting no epoch can time refused for good; one
whose workers' start (an interpreter each, under spawn or forkserver) the budget left cannot
pay waiting until it can, its start predicted from the starts seen on the run."""

from __future__ import annotations

import dataclasses
import multiprocessing

import pytest
import torch

from autotune.machine import detect
from autotune.online.admission import Admission, WorkerStarts, starts_slowly
from autotune.online.budget import Budget
from autotune.online.proposals import Proposals
from autotune.online.reading import Reading
from autotune.online.space import online_space
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.runtime.failures import FailureKind

START = PipelineConfig(decoder=AS_IS)  # no workers
OWN = PipelineConfig(decoder=AS_IS, num_workers=2)  # workers that do not persist
MANY = dataclasses.replace(OWN, num_workers=16, persistent_workers=True, prefetch_factor=2)


def started(settings: PipelineConfig, first_batch_s: float, epoch_start_s: float = 0.0):
    """A reading of 10 batches in 1 s (0.1 s a batch) after a switch whose first batch
    waited ``first_batch_s``."""
    return Reading(settings, 100.0, 0.02, 0.5, first_batch_s, 10, 1.0, epoch_start_s=epoch_start_s)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_start_is_predicted_as_its_rounds_of_workers_times_the_slowest_round_seen() -> None:
    starts = WorkerStarts(2, slow=True)
    assert starts.predicted_s(MANY) is None  # none seen: not predicted
    assert starts.predicted_s(START) == 0.0
    starts.seen(started(OWN, first_batch_s=3.1))  # 2 workers, one round of 2 CPUs: 3 s
    assert starts.predicted_s(MANY) == pytest.approx(8 * 3.0)
    assert starts.predicted_s(dataclasses.replace(MANY, num_workers=3)) == pytest.approx(6.0)
    # a start each epoch (workers that do not persist): the slowest seen counts
    starts.seen(started(OWN, first_batch_s=0.0, epoch_start_s=4.1))
    assert starts.predicted_s(MANY) == pytest.approx(8 * 4.0)


def test_workers_that_persist_refill_at_an_epoch_s_start_and_forked_ones_start_at_once() -> None:
    starts = WorkerStarts(2, slow=True)
    starts.seen(started(MANY, first_batch_s=0.0, epoch_start_s=5.0))  # a refill, no start
    assert starts.predicted_s(MANY) is None
    forked = WorkerStarts(2, slow=False)
    forked.seen(started(OWN, first_batch_s=3.1))
    assert forked.predicted_s(MANY) == 0.0


def test_a_setting_whose_start_the_budget_cannot_pay_waits_until_the_run_has_grown_it() -> None:
    clock = Clock()
    # an epoch of 10 batches at 10 batches/s: 1 s, or a tenth of the run where more
    budget = Budget(1.0, run_share=0.1, min_setting_s=0.5, batches_per_epoch=10, clock=clock)
    budget.first_reading(started(OWN, 3.1))
    starts = WorkerStarts(2, slow=True)
    starts.seen(started(OWN, 3.1))
    admission = Admission(budget, lambda settings: 0, starts)
    assert admission.unpaid(START) is None and not admission.short
    why = admission.unpaid(MANY)  # 24 s of starts and 0.5 s of timing, where 1 s is left
    assert why is not None and why.kind is FailureKind.OVER_BUDGET
    assert "about 24.0 s" in why.message and admission.short  # nothing else waits less
    clock.now = 244.0  # a tenth of the run: 24.5 s
    assert not admission.short and admission.unpaid(MANY) is None


def test_what_waits_is_kept_from_an_ask_that_found_nothing_the_budget_pays_for() -> None:
    clock = Clock()
    budget = Budget(1.0, run_share=0.1, min_setting_s=0.5, batches_per_epoch=10, clock=clock)
    budget.first_reading(started(OWN, 3.1))
    starts = WorkerStarts(2, slow=True)
    starts.seen(started(OWN, 3.1))  # 3 s a round of 2 workers
    admission = Admission(budget, lambda settings: 0, starts)
    space = online_space(detect(want_cuda=False), batch_size=4, cuda=False, workers=(0, 16))
    proposals = Proposals(space, None)
    many = {"num_workers": 16, "prefetch_factor": 2, "persistent_workers": True, "main_threads": 1}
    proposals.queue(many)  # waits: 24 s of starts
    measured = []
    while (config := admission.ask(proposals)) is not None:  # those without workers
        assert admission.waiting_s is None  # one was paid for: nothing said to wait
        measured.append(config)
        proposals.tell(config, started(config, 0.0))
    assert measured and all(not config.num_workers for config in measured)
    assert admission.waiting_s == pytest.approx(24.5) and admission.short
    clock.now = 245.0
    assert admission.ask(proposals) == space.config_at(many)  # paid for, first


def test_refused_for_good_where_no_epoch_can_time_it_or_persisting_workers_go_stale() -> None:
    budget = Budget(1.0, batches_per_epoch=10)
    admission = Admission(
        budget, lambda settings: 4 * settings.num_workers, WorkerStarts(2, slow=False)
    )
    assert admission.refused(OWN) is None  # 8 batches of 10
    refused = admission.refused(MANY)
    assert refused is not None and refused.kind is FailureKind.UNTIMEABLE
    admission.persist_refused = True
    few = dataclasses.replace(MANY, num_workers=1)
    assert admission.refused(few) is not None and admission.refused(OWN) is None


@pytest.mark.parametrize(
    ("method", "slowly"), [("fork", False), ("forkserver", True), ("spawn", True)]
)
def test_workers_start_slowly_under_spawn_or_forkserver(method, slowly) -> None:
    loader = torch.utils.data.DataLoader(
        range(4), num_workers=1, multiprocessing_context=multiprocessing.get_context(method)
    )
    assert starts_slowly(loader) is slowly
