"""What each setting of the winner is worth: the interleaved rounds, the budget, the effect in
words and the notes."""

from __future__ import annotations

import dataclasses

import optuna
import pytest
from helpers import make_session
from winner_data import BASELINE, DECODERS, TUNED, WINNER_CONFIG

from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.tuner import ablation as ablation_module
from autotune.tuner.ablation import (
    NO_EFFECT,
    WINNER,
    Ablation,
    ablate,
    faster_note,
    prepared_copy_note,
    reduced_decode_note,
)
from autotune.tuner.metrics import Confirmed
from autotune.tuner.variants import variants


def _study(walls: list[float]) -> optuna.Study:
    """A finished search: complete trials of the winner's config, each ``wall`` seconds."""
    study = optuna.create_study(direction="maximize")
    for wall in walls:
        study.add_trial(
            optuna.trial.create_trial(
                value=1.0,
                params={},
                distributions={},
                user_attrs={"wall_s": wall, "pipeline": WINNER_CONFIG.to_dict()},
            )
        )
    return study


RATES = {"num_workers=0": 200.0, "main_threads=2": 498.0, "decoder=pil": 300.0}


def _fake_run(order: list[str], rates: dict[str, float] = RATES):
    planned = variants(WINNER_CONFIG, BASELINE, tuned=TUNED, decoders_ranked=DECODERS[1:])

    def run(job, *, timeout_s):
        label = next((v.label for v in planned if v.config == job.pipeline), WINNER)
        order.append(label)
        rate = rates.get(label, 500.0)
        m = Measurement(rate, (rate * 0.99, rate, rate * 1.01), 0.1, 0.01, 4, 12)
        return TrialOutcome("ok", measurement=m)

    return run


def _winner() -> Confirmed:
    return Confirmed("trial 7", 7, WINNER_CONFIG, (500.0,))


def test_the_variants_are_measured_interleaved_with_the_winner_within_the_budget():
    session = make_session(
        ["study.epoch_aware=false", "study.ablation_rounds=2", "study.ablation_budget=0.25"]
    )
    order: list[str] = []
    # 40 trials of 10 s: 400 s of search; a quarter, 100 s, is 2 rounds of 5 runs of 10 s
    ablation = ablate(session, _study([10.0] * 40), _winner(), BASELINE, run=_fake_run(order))
    assert ablation is not None
    first = [WINNER, "decoder=pil", "main_threads=2", "persistent_workers=False", "num_workers=0"]
    assert order == first + first  # the same rounds: A B C D E A B C D E
    assert [r["label"] for r in ablation.rows] == first[1:]
    assert ablation.left_out[0] == "prefetch_factor=2" and ablation.search_seconds == 400.0
    pil = ablation.rows[0]
    assert pil["ratio"] == pytest.approx(0.6) and pil["verdict"] == "worth"
    assert pil["effect"] == "the winner's decoder is worth 1.67x"


def test_the_table_s_runs_are_as_long_as_a_search_trial_and_counted_so():
    """Not as long as the confirmation's (window.confirm_max_timed_s): a quarter of the search
    then covers several settings."""
    session = make_session(["study.epoch_aware=false", "study.ablation_budget=0.25"])
    caps: list[float] = []
    fake = _fake_run([])

    def run(job, *, timeout_s):
        caps.append(job.window.max_timed_s)
        return fake(job, timeout_s=timeout_s)

    # 400 s of search in trials of 20 s; a quarter, 100 s, is 5 runs: the winner and 4 variants
    ablation = ablate(session, _study([20.0] * 20), _winner(), BASELINE, run=run)
    assert len(caps) == 5 and len(ablation.rows) == 4
    window = session.config.window
    assert set(caps) == {window.max_timed_s} and window.confirm_max_timed_s > window.max_timed_s


def test_settings_inside_the_spread_have_no_measurable_effect():
    session = make_session(["study.epoch_aware=false", "study.ablation_budget=10"])
    ablation = ablate(session, _study([10.0] * 40), _winner(), BASELINE, run=_fake_run([]))
    assert ablation is not None and not ablation.left_out and not ablation.failed
    by_label = {r["label"]: r for r in ablation.rows}
    assert by_label["main_threads=2"]["effect"] == NO_EFFECT  # 498 inside 495-505
    assert by_label["num_workers=0"]["effect"] == "the winner's num_workers is worth 2.50x"
    assert by_label["num_workers=0"]["also_changed"] == ["persistent_workers", "prefetch_factor"]
    note = reduced_decode_note(ablation, WINNER_CONFIG)
    # the winner against itself at the fastest full decode (all full ones at 500 but pil)
    assert note == (
        "reduced decode (pil_reduced) has no measurable effect against full decode (opencv) "
        "at the winner's other settings"
    )


def test_reduced_decode_worth_is_said_against_the_full_decode():
    session = make_session(["study.epoch_aware=false", "study.ablation_budget=10"])
    slower = {"decoder=pil": 300.0, "decoder=opencv": 400.0, "decoder=torchvision": 350.0}
    ablation = ablate(session, _study([10.0] * 40), _winner(), BASELINE, run=_fake_run([], slower))
    assert ablation is not None
    assert reduced_decode_note(ablation, WINNER_CONFIG) == (
        "reduced decode (pil_reduced) is 1.25x the winner at full decode (opencv, nothing "
        "else changed)"
    )


def test_no_budget_measures_nothing_and_says_what_was_left_out():
    session = make_session(["study.ablation_budget=0.01"])
    order: list[str] = []
    ablation = ablate(session, _study([10.0] * 4), _winner(), BASELINE, run=_fake_run(order))
    assert ablation is not None and not ablation.rows and not order
    assert ablation.left_out[0] == "decoder=pil"
    # nothing says what a run costs: no ablation, and nothing divides by zero
    assert ablate(session, _study([0.0] * 4), _winner(), BASELINE, run=_fake_run(order)) is None


def test_a_variant_faster_than_the_winner_is_said_not_picked():
    session = make_session(["study.epoch_aware=false", "study.ablation_budget=10"])
    faster = {**RATES, "decoder=torchvision": 600.0}
    ablation = ablate(session, _study([10.0] * 40), _winner(), BASELINE, run=_fake_run([], faster))
    assert ablation is not None
    row = next(r for r in ablation.rows if r["label"] == "decoder=torchvision")
    assert (
        row["verdict"] == "faster" and row["effect"] == "decoder=torchvision is 1.20x the winner"
    )
    note = faster_note(ablation)
    assert note is not None and "decoder=torchvision (1.20x)" in note
    assert "raise study.n_trials" in note


def test_no_run_starts_that_would_pass_the_budget(monkeypatch):
    """The estimate said 4 variants fit; the runs take longer than the search's did: the
    budget is enforced, the rest left out, none of them called failed."""
    import autotune.tuner.confirm as confirm_module

    clock = {"now": 0.0}
    monkeypatch.setattr(confirm_module.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(ablation_module.time, "monotonic", lambda: clock["now"])
    session = make_session(["study.epoch_aware=false", "study.ablation_budget=0.25"])
    inner = _fake_run([])

    def slow(job, *, timeout_s):
        clock["now"] += 30.0  # three times the search's 10 s a run
        return inner(job, timeout_s=timeout_s)

    # 400 s of search: 100 s allowed, a run is 30 s: the winner and two variants, then stop
    ablation = ablate(session, _study([10.0] * 40), _winner(), BASELINE, run=slow)
    assert ablation is not None and len(ablation.rows) == 2 and not ablation.failed
    assert ablation.seconds <= 100.0
    assert ablation.left_out[:2] == ("persistent_workers=False", "num_workers=0")


def test_a_prepared_copy_is_said_with_its_cost_and_its_break_even():
    """60 s of preparation over 90 epochs of 3,200 samples: 0.67 s charged to each; the
    winner 400 samples/s so charged, 200 without its copy: 8 s an epoch against 16 s - 0.67."""
    cached = dataclasses.replace(WINNER_CONFIG, cache="decoded")
    winner = Confirmed("trial 7", 7, cached, (400.0,), epoch_samples=3200)
    row = {
        "knob": "cache",
        "value": "none",
        "also_changed": [],
        "verdict": "worth",
        "samples_per_s": 200.0,
        "winner_samples_per_s": 400.0,
    }
    table = Ablation({"samples_per_s": 400.0}, (row,), (), 1.0, 10.0, 0.25)
    note = prepared_copy_note(table, winner, 60.0, 90)
    assert note.startswith("the decoded copy took 60.0 s to prepare, once: 0.67 s charged")
    # uncharged, the cached epoch is 8 - 0.67 = 7.33 s; without it 16 s: 60 / 8.67 = 6.9
    assert note.endswith(
        "the winner is 2.00x itself without it (cache=none, nothing else "
        "changed), and the copy pays for itself after 6.9 epochs"
    )
    assert prepared_copy_note(None, winner, 60.0, 90).endswith(
        "each of the study.epochs=90 planned"
    )
    assert prepared_copy_note(table, _winner(), 60.0, 90) is None  # no copy, nothing said
    level = {**row, "verdict": "none", "samples_per_s": 399.0}
    assert prepared_copy_note(
        dataclasses.replace(table, rows=(level,)), winner, 60.0, 90
    ).endswith("no slower: it never pays")


def test_the_winner_without_its_prepared_copy_is_measured_whatever_the_budget():
    """The budget allows no variant; a prepared copy's break-even is still the report's to
    say, so the winner without its copy is measured beside it."""
    session = make_session(["study.epoch_aware=false", "study.ablation_budget=0.01"])
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
    ablation = ablate(session, _study([10.0] * 4), winner, BASELINE, run=run)
    assert ablation is not None and [r["label"] for r in ablation.rows] == ["cache=none"]
    assert order == [WINNER, "cache=none"] * session.config.study.ablation_rounds
    assert ablation.rows[0]["effect"] == "the winner's cache is worth 2.00x"
    assert "cache=none" not in ablation.left_out and ablation.left_out
