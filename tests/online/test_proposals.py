"""Tests for autotune.online.proposals: the run's trials, asked of the study's sampler and told
what each setting read; a point measured before told its rate again, costing nothing; one
that cannot run failed with why; one asked when the run stops, interrupted."""

from __future__ import annotations

import optuna
import pytest

from autotune.machine import detect
from autotune.online.proposals import REPEATS_TO_STOP, Proposals
from autotune.online.reading import Reading
from autotune.online.space import online_space
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.runtime.failures import Failure, FailureKind
from autotune.session.space import SearchSpace
from autotune.tuner.store import TrialKey

SPACE = online_space(detect(want_cuda=False), batch_size=4, cuda=False)
OWN = PipelineConfig(decoder=AS_IS, batch_size=4, main_threads=1)  # a point of the space
NEVER = Failure(FailureKind.UNTIMEABLE, "no epoch can time it")
UNPAID = Failure(FailureKind.OVER_BUDGET, "its workers' start is more than the budget left")


def always(config: PipelineConfig) -> None:
    return None


def reading(settings: PipelineConfig, rate: float) -> Reading:
    return Reading(settings, rate, 0.02, 0.5, 0.01, batches=10, seconds=1.0)


MANY = {"num_workers": 8, "prefetch_factor": 4, "persistent_workers": True, "main_threads": 1}


def _proposing(point: dict) -> tuple[SearchSpace, Proposals]:
    """A space of 0, 2, 4 or 8 workers, and proposals whose sampler proposes ``point`` first
    (forced)."""
    space = online_space(detect(want_cuda=False), batch_size=4, cuda=False, workers=(0, 2, 4, 8))
    proposals = Proposals(space, optuna.create_study(direction="maximize"))
    proposals.study.enqueue_trial(point)
    return space, proposals


@pytest.fixture
def proposals() -> Proposals:
    return Proposals(SPACE, optuna.create_study(direction="maximize"))


def test_a_point_measured_before_is_told_its_rate_and_repeats_in_a_row_end_the_asking(
    proposals,
) -> None:
    params = SPACE.params_of(OWN)
    assert params is not None
    proposals.queue(params)
    assert proposals.ask(always) == OWN and proposals.asked
    proposals.tell(OWN, reading(OWN, 100.0))
    for _ in range(REPEATS_TO_STOP):  # the sampler proposes it again (forced)
        proposals.study.enqueue_trial(params)
    assert proposals.ask(always) is None and not proposals.asked  # nothing new to measure
    first, *repeats = proposals.study.trials
    assert first.value == 100.0 and first.user_attrs[TrialKey.CONFIG] == OWN.short()
    assert len(repeats) == REPEATS_TO_STOP
    assert all(t.value == 100.0 and t.user_attrs[TrialKey.REPEAT_OF] == 0 for t in repeats)


def test_a_point_no_epoch_can_time_is_failed_with_why_and_the_next_asked(proposals) -> None:
    many = {**SPACE.params_of(OWN), "num_workers": 2, "prefetch_factor": 2}  # type: ignore[arg-type]
    many["persistent_workers"] = True
    proposals.queue(many)
    asked = proposals.ask(lambda config: NEVER if config.num_workers >= 2 else None)
    assert asked is not None and asked.num_workers < 2
    failed = proposals.study.trials[0]
    assert failed.state == optuna.trial.TrialState.FAIL
    assert failed.user_attrs[TrialKey.FAILURE]["message"] == "no epoch can time it"


def test_a_sampler_point_no_epoch_can_time_is_measured_with_the_most_workers_that_fit() -> None:
    """Told nothing of a failed point, the sampler would ask for its like again and again
    (a trial each, in the training loop's time): the same point with fewer workers, as many
    as an epoch can time, is measured in its place; once measured, the next fewer that fit;
    once each is measured, a repeat."""
    space, proposals = _proposing(MANY)

    def fits(config: PipelineConfig) -> Failure | None:
        return NEVER if config.num_workers > 2 else None

    asked = proposals.ask(fits)
    assert asked == space.config_at({**MANY, "num_workers": 2}) and proposals.asked
    (failed,) = proposals.study.trials
    assert failed.state == optuna.trial.TrialState.FAIL and failed.params == MANY
    proposals.tell(asked, reading(asked, 100.0))
    measured = proposals.study.trials[1]
    assert measured.params == space.params_of(asked) and measured.value == 100.0
    for _ in range(1 + REPEATS_TO_STOP):  # its like, beyond reach, the nearest measured
        proposals.study.enqueue_trial({**MANY, "num_workers": 4})
    fewer = proposals.ask(fits)  # the next fewer workers that fit, not measured yet
    assert fewer == space.config_at({**MANY, "num_workers": 0})
    proposals.tell(fewer, reading(fewer, 50.0))
    assert proposals.ask(fits) is None and not proposals.asked  # each measured: nothing new
    # where no fewer workers fit either, nothing here can be timed: one trial, no more asked
    trials = len(proposals.study.trials)
    proposals.study.enqueue_trial({**MANY, "prefetch_factor": 2})
    proposals.study.enqueue_trial({**MANY, "prefetch_factor": 3})
    assert proposals.ask(lambda config: NEVER) is None
    assert [t.state.name for t in proposals.study.trials[trials:]] == ["FAIL", "WAITING"]


def test_a_queued_point_whose_start_is_not_paid_for_waits_and_comes_first_once_it_is(
    proposals,
) -> None:
    own = SPACE.params_of(OWN)
    many = {**own, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}  # type: ignore[dict-item]
    proposals.queue(many)
    proposals.queue(own)  # type: ignore[arg-type]

    def unpaid(config: PipelineConfig) -> Failure | None:
        return UNPAID if config.num_workers else None

    assert proposals.ask(always, unpaid) == OWN  # the first queued waits
    proposals.tell(OWN, reading(OWN, 100.0))
    assert proposals.ask(always, always) == SPACE.config_at(many)  # paid for now
    assert [t.state.name for t in proposals.study.trials] == ["COMPLETE"]  # no trial failed
    proposals.tell(SPACE.config_at(many), reading(SPACE.config_at(many), 150.0))
    # one that could never run does not wait to be paid for: it fails
    proposals.queue({**many, "prefetch_factor": 4})
    proposals.ask(lambda config: NEVER if config.num_workers else None, unpaid)
    assert proposals.study.trials[2].state == optuna.trial.TrialState.FAIL


def test_a_sampler_point_whose_start_is_not_paid_for_is_failed_untold_and_asked_again() -> None:
    """The sampler's trial is failed with why, fewer workers whose start is paid for are
    measured in its place, and the point is not told a rate: asked again once the budget
    has grown, it is measured."""
    space, proposals = _proposing(MANY)

    def unpaid(config: PipelineConfig) -> Failure | None:
        return UNPAID if config.num_workers > 2 else None

    asked = proposals.ask(always, unpaid)
    assert asked == space.config_at({**MANY, "num_workers": 2})
    (failed,) = proposals.study.trials
    assert failed.state == optuna.trial.TrialState.FAIL
    assert failed.user_attrs[TrialKey.FAILURE]["kind"] == "over_budget"
    proposals.tell(asked, reading(asked, 100.0))
    for _ in range(1 + REPEATS_TO_STOP):  # asked again: the next fewer, then none is left
        proposals.study.enqueue_trial(MANY)
    fewer = proposals.ask(always, unpaid)
    assert fewer == space.config_at({**MANY, "num_workers": 0})
    proposals.tell(fewer, reading(fewer, 50.0))
    assert proposals.ask(always, unpaid) is None  # it waits: repeats end the asking
    proposals.study.enqueue_trial(MANY)
    assert proposals.ask(always, always) == space.config_at(MANY)  # paid for: measured


def test_a_setting_whose_workers_failed_is_told_so_and_never_measured_again(proposals) -> None:
    params = SPACE.params_of(OWN)
    assert params is not None
    proposals.queue(params)
    proposals.ask(always)
    proposals.tell(OWN, reading(OWN, 100.0))
    proposals.never_again(OWN)  # kept, then its workers died
    proposals.study.enqueue_trial(params)  # the sampler proposes it again (forced)
    proposals.ask(always)  # told 0 samples/s, not measured
    assert proposals.study.trials[1].value == 0.0
    assert proposals.study.trials[1].user_attrs[TrialKey.REPEAT_OF] == 0


def test_a_trial_asked_when_the_run_stops_is_recorded_interrupted(proposals) -> None:
    proposals.ask(always)
    proposals.close()
    (trial,) = proposals.study.trials
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs[TrialKey.FAILURE]["kind"] == FailureKind.INTERRUPTED.value
    proposals.close()  # once
    assert len(proposals.study.trials) == 1


def test_a_point_a_run_queues_is_never_handed_to_another_run_of_the_job(tmp_path) -> None:
    """Two runs of one job at once (a sweep's seeds on one host) share its study: each
    measures the points it queued (its own settings first), and each is a trial once read."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    runs = [
        Proposals(SPACE, optuna.create_study(
            study_name="job", storage=storage, direction="maximize", load_if_exists=True
        ))
        for _ in range(2)
    ]  # fmt: skip
    other = SPACE.config_at(next(p for p in SPACE.grid() if SPACE.config_at(p) != OWN))
    for run, point in zip(runs, (OWN, other), strict=True):
        run.queue(SPACE.params_of(point))  # type: ignore[arg-type]
    study = runs[0].study
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))  # none shared
    assert runs[1].ask(always) == other and runs[0].ask(always) == OWN
    runs[0].tell(OWN, reading(OWN, 100.0))
    runs[1].tell(other, reading(other, 150.0))
    measured = {t.user_attrs[TrialKey.CONFIG]: t.value for t in study.trials}
    assert measured == {OWN.short(): 100.0, other.short(): 150.0}
    assert [t.params for t in study.trials] == [SPACE.params_of(OWN), SPACE.params_of(other)]
