"""What each setting of the winner is worth: the variants, the interleaved rounds, the budget
and the effect in words."""

from __future__ import annotations

import dataclasses

import optuna
import pytest
from helpers import make_session

from autotune.pipeline.config import PipelineConfig
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.tuner.ablation import (
    NO_EFFECT,
    WINNER,
    ablate,
    faster_note,
    reduced_decode_note,
    variants,
)
from autotune.tuner.metrics import Confirmed

BASELINE = PipelineConfig(batch_size=32, main_threads=2, decoder="as_is")
WINNER_CONFIG = PipelineConfig(
    batch_size=32,
    num_workers=2,
    prefetch_factor=4,
    persistent_workers=True,
    decoder="pil_reduced",
    main_threads=1,
)
DECODERS = ["as_is", "pil", "pil_reduced", "opencv", "torchvision"]


def _changed(a: PipelineConfig, b: PipelineConfig) -> set[str]:
    return {f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}


def test_each_variant_changes_one_setting_of_the_winner():
    out = variants(WINNER_CONFIG, BASELINE, DECODERS)
    assert [v.label for v in out] == [
        "decoder=pil",  # full decodes first: what reducing is worth
        "decoder=opencv",
        "decoder=torchvision",
        "decoder=as_is",  # the user's pipeline as it is, at the winner's loader settings
        "num_workers=0",
        "main_threads=2",  # torch's own thread count, as the baseline runs
        "persistent_workers=False",
        "prefetch_factor=2",
        "transfer=float",  # the tutorial normalizes in the workers
    ]
    for v in out:
        changed = _changed(v.config, WINNER_CONFIG)
        if v.knob == "num_workers":  # no workers: DataLoader refuses prefetch and persistence
            assert changed == {"num_workers", "prefetch_factor", "persistent_workers"}
        elif v.knob == "decoder" and v.value == "as_is":  # the Dataset as it is: its own
            assert changed == {"decoder", "transfer", "drop_last"}  # transfer, every sample
        else:
            assert changed == {v.knob}, v.label


def test_a_winner_at_the_defaults_has_only_its_decoder_to_swap():
    plain = PipelineConfig(batch_size=32, main_threads=2, decoder="pil", transfer="float")
    assert [v.label for v in variants(plain, BASELINE, ["as_is", "pil"])] == ["decoder=as_is"]


def _study(walls: list[float]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for wall in walls:
        study.add_trial(
            optuna.trial.create_trial(
                value=1.0, params={}, distributions={}, user_attrs={"wall_s": wall}
            )
        )
    return study


RATES = {"num_workers=0": 200.0, "main_threads=2": 498.0, "decoder=pil": 300.0}


def _fake_run(order: list[str]):
    def run(job, *, timeout_s):
        config = job.pipeline
        label = next(
            (v.label for v in variants(WINNER_CONFIG, BASELINE, DECODERS) if v.config == config),
            WINNER,
        )
        order.append(label)
        rate = RATES.get(label, 500.0)
        m = Measurement(rate, (rate * 0.99, rate, rate * 1.01), 0.1, 0.01, 4, 12)
        return TrialOutcome("ok", measurement=m)

    return run


def _winner() -> Confirmed:
    return Confirmed("trial 7", 7, WINNER_CONFIG, (500.0,))


def test_the_variants_are_measured_interleaved_with_the_winner_within_the_budget():
    session = make_session(
        [
            "study.epoch_aware=false",
            "study.confirm_rounds=2",
            "study.ablation_budget=0.25",
            "search_space=default",
        ]
    )
    order: list[str] = []
    # 40 trials of 10 s: 400 s of search, a quarter is 100 s: 2 rounds of 5 runs of 10 s
    ablation = ablate(session, _study([10.0] * 40), _winner(), BASELINE, run=_fake_run(order))
    assert ablation is not None
    assert order[:5] == [
        WINNER,
        "decoder=pil",
        "decoder=opencv",
        "decoder=torchvision",
        "decoder=as_is",
    ]
    assert order[5:] == order[:5]  # the same rounds: A B C D E A B C D E
    assert [r["knob"] + "=" + str(r["value"]) for r in ablation.rows] == order[1:5]
    assert "num_workers=0" in ablation.left_out and ablation.search_seconds == 400.0
    pil = ablation.rows[0]
    assert pil["ratio"] == pytest.approx(0.6) and pil["effect"] == (
        "the winner's setting is worth 1.67x"
    )


def test_settings_inside_the_spread_have_no_measurable_effect():
    session = make_session(["study.epoch_aware=false", "study.ablation_budget=10"])
    ablation = ablate(session, _study([10.0] * 40), _winner(), BASELINE, run=_fake_run([]))
    assert ablation is not None and not ablation.left_out
    by_label = {f"{r['knob']}={r['value']}": r for r in ablation.rows}
    assert by_label["main_threads=2"]["effect"] == NO_EFFECT  # 498 inside 495-505
    assert by_label["num_workers=0"]["effect"] == "the winner's setting is worth 2.50x"
    note = reduced_decode_note(ablation, WINNER_CONFIG)
    # the winner against itself at the fastest full decode (all full ones at 500 but pil)
    assert note == (
        "reduced decode (pil_reduced) has no measurable effect against full decode (opencv) "
        "at the winner's other settings"
    )


def test_no_budget_measures_nothing_and_says_what_was_left_out():
    session = make_session(["study.ablation_budget=0.01"])
    order: list[str] = []
    ablation = ablate(session, _study([10.0] * 4), _winner(), BASELINE, run=_fake_run(order))
    assert ablation is not None and not ablation.rows and not order
    assert ablation.left_out[0] == "decoder=pil"


def test_a_variant_faster_than_the_winner_is_said_not_picked():
    session = make_session(["study.epoch_aware=false", "study.ablation_budget=10"])
    RATES_FASTER = {**RATES, "decoder=torchvision": 600.0}
    order: list[str] = []

    def run(job, *, timeout_s):
        label = next(
            (
                v.label
                for v in variants(WINNER_CONFIG, BASELINE, DECODERS)
                if v.config == job.pipeline
            ),
            WINNER,
        )
        order.append(label)
        rate = RATES_FASTER.get(label, 500.0)
        m = Measurement(rate, (rate * 0.99, rate, rate * 1.01), 0.1, 0.01, 4, 12)
        return TrialOutcome("ok", measurement=m)

    ablation = ablate(session, _study([10.0] * 40), _winner(), BASELINE, run=run)
    assert ablation is not None
    note = faster_note(ablation)
    assert note is not None and "decoder=torchvision (1.20x)" in note
    assert "raise study.n_trials" in note
