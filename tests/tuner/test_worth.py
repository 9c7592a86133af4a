"""What each setting of the winner is worth: the interleaved rounds, the budget, the effect in
words, and the variant that beat the winner queued in the study."""

from __future__ import annotations

import dataclasses

import optuna
import pytest
from helpers import make_session
from winner_data import (
    BASELINE,
    DECODERS,
    RATES,
    TUNED,
    WINNER_CONFIG,
    fake_run,
    search_of,
    winner,
)

from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.tuner import worth as worth_module
from autotune.tuner.metrics import Confirmed
from autotune.tuner.variants import variants
from autotune.tuner.worth import NO_EFFECT, WINNER, measure_worth
from autotune.tuner.worth_notes import reduced_decode_note


def test_the_variants_are_measured_interleaved_with_the_winner_within_the_budget():
    session = make_session(
        ["study.epoch_aware=false", "study.worth_rounds=2", "study.worth_budget=0.25"]
    )
    order: list[str] = []
    # 40 trials of 10 s: 400 s of search; a quarter, 100 s, is 2 rounds of 5 runs of 10 s
    worth = measure_worth(session, search_of([10.0] * 40), winner(), BASELINE, run=fake_run(order))
    assert worth is not None
    first = [WINNER, "decoder=pil", "main_threads=2", "persistent_workers=False", "num_workers=0"]
    assert order == first + first  # the same rounds: A B C D E A B C D E
    assert [r["label"] for r in worth.rows] == first[1:]
    assert worth.left_out[0] == "prefetch_factor=2" and worth.search_seconds == 400.0
    pil = worth.rows[0]
    assert pil["ratio"] == pytest.approx(0.6) and pil["verdict"] == "worth"
    assert pil["effect"] == "the winner's decoder is worth 1.67x"


def test_the_table_s_runs_are_as_long_as_a_search_trial_and_counted_so():
    """Not as long as the confirmation's (window.confirm_max_timed_s): a quarter of the search
    then covers several settings."""
    longer = "window.confirm_max_timed_s=40"  # a confirmation set longer than the search's
    session = make_session(["study.epoch_aware=false", "study.worth_budget=0.25", longer])
    caps: list[float] = []
    fake = fake_run([])

    def run(job, *, timeout_s):
        caps.append(job.window.max_timed_s)
        return fake(job, timeout_s=timeout_s)

    # 400 s of search in trials of 20 s; a quarter, 100 s, is 5 runs: the winner and 4 variants
    worth = measure_worth(session, search_of([20.0] * 20), winner(), BASELINE, run=run)
    assert len(caps) == 5 and len(worth.rows) == 4
    window = session.conf.window
    assert set(caps) == {window.max_timed_s} and window.confirm_max_timed_s > window.max_timed_s


def test_settings_inside_the_spread_have_no_measurable_effect():
    session = make_session(["study.epoch_aware=false", "study.worth_budget=10"])
    worth = measure_worth(session, search_of([10.0] * 40), winner(), BASELINE, run=fake_run([]))
    assert worth is not None and not worth.left_out and not worth.failed
    by_label = {r["label"]: r for r in worth.rows}
    assert by_label["main_threads=2"]["effect"] == NO_EFFECT  # 498 inside 495-505
    assert by_label["num_workers=0"]["effect"] == "the winner's num_workers is worth 2.50x"
    assert by_label["num_workers=0"]["also_changed"] == ["persistent_workers", "prefetch_factor"]
    note = reduced_decode_note(worth, WINNER_CONFIG)
    # the winner against itself at the fastest full decode (all full ones at 500 but pil)
    assert note == (
        "reduced decode (pil_reduced) has no measurable effect against full decode (opencv) "
        "at the winner's other settings"
    )


def test_no_budget_measures_nothing_and_says_what_was_left_out():
    session = make_session(["study.worth_budget=0.01"])
    order: list[str] = []
    worth = measure_worth(session, search_of([10.0] * 4), winner(), BASELINE, run=fake_run(order))
    assert worth is not None and not worth.rows and not order
    assert worth.left_out[0] == "decoder=pil"
    # nothing says what a run costs: no worth, and nothing divides by zero
    assert (
        measure_worth(session, search_of([0.0] * 4), winner(), BASELINE, run=fake_run(order))
        is None
    )


def test_no_run_starts_that_would_pass_the_budget(monkeypatch):
    """The estimate said 4 variants fit; the runs take longer than the search's did: the
    budget is enforced, the rest left out, none of them called failed."""
    import autotune.tuner.confirm as confirm_module

    clock = {"now": 0.0}
    monkeypatch.setattr(confirm_module.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(worth_module.time, "monotonic", lambda: clock["now"])
    session = make_session(["study.epoch_aware=false", "study.worth_budget=0.25"])
    inner = fake_run([])

    def slow(job, *, timeout_s):
        clock["now"] += 30.0  # three times the search's 10 s a run
        return inner(job, timeout_s=timeout_s)

    # 400 s of search: 100 s allowed, a run is 30 s: the winner and two variants, then stop
    worth = measure_worth(session, search_of([10.0] * 40), winner(), BASELINE, run=slow)
    assert worth is not None and len(worth.rows) == 2 and not worth.failed
    assert worth.seconds <= 100.0
    assert worth.left_out[:2] == ("persistent_workers=False", "num_workers=0")


def test_the_winner_without_its_prepared_copy_is_measured_whatever_the_budget():
    """The budget allows no variant; a prepared copy's break-even is still the report's to
    say, so the winner without its copy is measured beside it."""
    session = make_session(["study.epoch_aware=false", "study.worth_budget=0.01"])
    cached = dataclasses.replace(WINNER_CONFIG, decoder="pil", cache="decoded")
    planned = variants(cached, BASELINE, tuned=[*TUNED, "cache"], decoders_ranked=DECODERS[1:])
    assert planned[0].label == "cache=none"
    order: list[str] = []

    def run(job, *, timeout_s):
        label = "cache=none" if job.pipeline.cache == "none" else WINNER
        order.append(label)
        rate = 250.0 if label == "cache=none" else 500.0
        m = Measurement(rate, (rate * 0.99, rate, rate * 1.01), 0.1, 0.01, 4, 12)
        return TrialOutcome("ok", measurement=m)

    winner = Confirmed("trial 7", 7, cached, (500.0,))
    worth = measure_worth(session, search_of([10.0] * 4), winner, BASELINE, run=run)
    assert worth is not None and [r["label"] for r in worth.rows] == ["cache=none"]
    assert order == [WINNER, "cache=none"] * session.conf.study.worth_rounds
    assert worth.rows[0]["effect"] == "the winner's cache is worth 2.00x"
    assert "cache=none" not in worth.left_out and worth.left_out


def test_a_variant_faster_than_the_winner_is_queued_as_the_study_s_next_trial():
    """The search never measured the winner with torchvision; it beat the winner in the
    round: a run with one trial more measures it first, as a polish step from the winner."""
    session = make_session(["study.epoch_aware=false", "study.worth_budget=10"])
    faster = {**RATES, "decoder=torchvision": 600.0}
    study = search_of([10.0] * 40)
    worth = measure_worth(session, study, winner(), BASELINE, run=fake_run([], faster))
    assert worth is not None
    row = next(r for r in worth.rows if r["label"] == "decoder=torchvision")
    assert row["verdict"] == "faster"
    assert row["effect"] == "decoder=torchvision is 1.20x the winner"
    assert worth.queued == {"label": "decoder=torchvision", "n_trials": 41}
    (queued,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert queued.user_attrs["polish_knob"] == "decoder" and queued.user_attrs["polish_from"] == 7
    again = measure_worth(session, study, winner(), BASELINE, run=fake_run([], faster))
    assert again is not None and again.queued == worth.queued  # queued once, not twice
    assert len(study.get_trials(states=(optuna.trial.TrialState.WAITING,))) == 1
    trial = study.ask()  # what the next trial of a resumed search runs
    assert trial.number == queued.number
    swapped = dataclasses.replace(WINNER_CONFIG, decoder="torchvision")
    assert session.space.suggest(trial) == swapped


def test_a_faster_variant_the_search_measured_is_named_not_queued():
    session = make_session(["study.epoch_aware=false", "study.worth_budget=10"])
    faster = {**RATES, "decoder=torchvision": 600.0}
    study = search_of([10.0] * 40)
    swapped = dataclasses.replace(WINNER_CONFIG, decoder="torchvision")
    study.add_trial(
        optuna.trial.create_trial(
            value=0.9, params={}, distributions={}, user_attrs={"pipeline": swapped.to_dict()}
        )
    )
    worth = measure_worth(session, study, winner(), BASELINE, run=fake_run([], faster))
    assert worth is not None
    assert worth.queued == {"label": "decoder=torchvision", "searched_as": 40}
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))


def test_one_round_s_difference_within_the_run_to_run_variation_is_no_effect():
    """Apart by their sub-windows (540 against 500), one run each: 8 % is within the 10 %
    two runs of one config differed by in the confirmation, and beyond 5 %; in two rounds
    each the IQRs decide."""
    session = make_session(["study.epoch_aware=false", "study.worth_budget=10"])
    faster = {**RATES, "decoder=torchvision": 540.0}
    verdicts = {}
    for noise in (0.10, 0.05):
        table = measure_worth(
            session,
            search_of([10.0] * 40),
            winner(),
            BASELINE,
            run=fake_run([], faster),
            run_to_run=noise,
        )
        assert table is not None and table.run_to_run == noise
        row = next(r for r in table.rows if r["label"] == "decoder=torchvision")
        verdicts[noise] = row["verdict"]
    assert verdicts == {0.10: "none", 0.05: "faster"}
    # two rounds: the IQRs hold the runs' variation themselves
    twice = make_session(
        ["study.epoch_aware=false", "study.worth_budget=10", "study.worth_rounds=2"]
    )
    run = fake_run([], faster)
    table = measure_worth(
        twice, search_of([10.0] * 40), winner(), BASELINE, run=run, run_to_run=0.10
    )
    row = next(r for r in table.rows if r["label"] == "decoder=torchvision")
    assert row["verdict"] == "faster"


def test_a_variant_that_was_a_finalist_is_taken_from_the_confirmation_not_run_again():
    """Its confirmation rounds, beside the winner's there, are its row and cost the budget
    nothing: the run it saves goes to the next variant. A row the search gave (0 rounds: the
    confirmation was stopped) is not a confirmation's and is run."""
    session = make_session(["study.epoch_aware=false", "study.worth_budget=0.075"])
    planned = variants(WINNER_CONFIG, BASELINE, tuned=TUNED, decoders_ranked=DECODERS[1:])
    config = {v.label: v.config for v in planned}
    confirmed = (
        Confirmed("baseline", None, BASELINE, (100.0,), rounds=2),
        dataclasses.replace(winner(), rounds=2),
        Confirmed("trial 3", 3, config["decoder=pil"], (280.0, 290.0, 300.0), rounds=2),
        Confirmed("trial 5", 5, config["main_threads=2"], (498.0,), rounds=0),
    )
    order: list[str] = []
    # 40 trials of 10 s: 400 s; 7.5 % of it, 30 s, is 3 runs: the winner and 2 variants
    worth = measure_worth(
        session, search_of([10.0] * 40), winner(), BASELINE, run=fake_run(order),
        confirmed=confirmed,
    )  # fmt: skip
    assert order == [WINNER, "main_threads=2", "persistent_workers=False"]
    labels = [r["label"] for r in worth.rows]
    assert labels == ["decoder=pil", "main_threads=2", "persistent_workers=False"]
    pil = worth.rows[0]
    assert pil["from_confirmation"] and pil["rounds"] == 2 and pil["samples_per_s"] == 290.0
    assert pil["winner_samples_per_s"] == 500.0 and pil["verdict"] == "worth"
    assert not worth.rows[1]["from_confirmation"]
    # a budget that allows no run: the finalist's row alone, the winner's the confirmation's
    order.clear()
    alone = measure_worth(
        session, search_of([10.0] * 4), confirmed[1], BASELINE, run=fake_run(order),
        confirmed=confirmed,
    )  # fmt: skip
    assert order == [] and [r["label"] for r in alone.rows] == ["decoder=pil"]
    assert alone.winner["rounds"] == 2 and alone.seconds == pytest.approx(0.0, abs=0.5)
