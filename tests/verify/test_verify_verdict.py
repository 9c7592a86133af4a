"""The verdict on hand-made figures: when a claim holds, when it differs and what is named as
the likely cause; the figures of an arm; how big an epoch is."""

from __future__ import annotations

import pytest
from verify_data import AS_IS, AS_IS_MEASURED, TUNED, epoch, runs

from autotune.pipeline.best_file import BestFile, Figures, PipelineFigures
from autotune.pipeline.config import PipelineConfig
from autotune.verify.figures import arm_figures, quartiles, tail_share
from autotune.verify.plan import BUDGET_S, RUN_OVERHEAD_S, epoch_size, estimate_s
from autotune.verify.verdict import (
    DIFFERS,
    HOLDS,
    NO_CLAIM,
    NOT_MEASURED,
    Ratio,
    claim_of,
    judge,
    ratio_to_baseline,
)

RESTARTING = PipelineConfig(batch_size=8, num_workers=2, prefetch_factor=2)
BASELINE = PipelineConfig(batch_size=8, decoder="as_is")
CONFIGS = {"baseline": BASELINE, "loader_kwargs": AS_IS, "build_loader": TUNED}
MEASURED = {"samples_per_s": 400.0, "baseline_samples_per_s": 200.0, "speedup_vs_baseline": 2.0}
BEST = BestFile(
    TUNED,
    measured=PipelineFigures(**MEASURED),
    as_is=AS_IS,
    as_is_measured=Figures(**AS_IS_MEASURED),
)


def best(**measured: float) -> BestFile:
    return BestFile(TUNED, measured=PipelineFigures(**{**MEASURED, **measured}), as_is=AS_IS)


def figures(**rates_by_arm):
    return {arm: arm_figures(arm, runs(arm, rounds)) for arm, rounds in rates_by_arm.items()}


def test_a_claim_within_ten_percent_holds():
    assert judge(2.0, Ratio(1.85, (1.84, 1.86))) == HOLDS  # 8 % off
    assert judge(2.0, Ratio(2.2, (2.19, 2.21))) == HOLDS  # 9 % off
    assert judge(2.0, Ratio(1.75, (1.74, 1.76))) == DIFFERS  # 14 % off, narrow IQR


def test_a_claim_inside_the_iqr_holds_even_when_far_from_the_median():
    assert judge(2.0, Ratio(1.5, (1.2, 2.1))) == HOLDS
    assert judge(2.0, Ratio(1.5, (1.2, 1.9))) == DIFFERS


def test_no_claim_is_said_so():
    assert judge(None, Ratio(0.93, (0.9, 0.95))) == NO_CLAIM


def test_ratio_is_over_the_baseline_median():
    base = arm_figures("baseline", runs("baseline", [[100.0, 100.0]]))
    tuned = arm_figures("build_loader", runs("build_loader", [[150.0, 250.0]]))
    ratio = ratio_to_baseline(tuned, base)
    assert ratio.value == pytest.approx(2.0)
    assert ratio.iqr == pytest.approx((1.75, 2.25))


def test_each_way_is_judged_on_its_own_claim():
    figs = figures(
        baseline=[[200.0, 200.0], [205.0, 195.0]],
        loader_kwargs=[[180.0, 190.0], [185.0, 186.0]],
        build_loader=[[390.0, 410.0], [400.0, 405.0]],
    )
    built = claim_of("build_loader", figs, CONFIGS, BEST)
    assert built.verdict == HOLDS and built.claimed == 2.0 and built.causes == ()
    kwargs = claim_of("loader_kwargs", figs, CONFIGS, BEST)  # loader_kwargs.measured's claim
    assert kwargs.verdict == HOLDS and kwargs.claimed == 0.95
    assert kwargs.measured.value == pytest.approx(185.5 / 200.0)
    unclaimed = claim_of("loader_kwargs", figs, CONFIGS, best())
    assert unclaimed.verdict == NO_CLAIM and unclaimed.claimed is None


def test_an_arm_that_never_ran_is_not_measured():
    figs = {
        "baseline": None,
        "build_loader": arm_figures("build_loader", runs("build_loader", [[1.0]])),
    }
    assert claim_of("build_loader", figs, CONFIGS, BEST).verdict == NOT_MEASURED


def test_differs_names_start_up_paid_every_epoch():
    figs = {
        "baseline": arm_figures("baseline", runs("baseline", [[200.0, 200.0]])),
        "build_loader": arm_figures(
            "build_loader", runs("build_loader", [[250.0, 250.0]], first_share=0.3)
        ),
    }
    claim = claim_of("build_loader", figs, {**CONFIGS, "build_loader": RESTARTING}, BEST)
    assert claim.verdict == DIFFERS and claim.measured.value == pytest.approx(1.25)
    assert any(
        c.startswith("start-up not amortized: the build_loader arm's workers restart every")
        and "30%" in c
        for c in claim.causes
    ), claim.causes
    # persistent workers do not restart: the same share is not named as per-epoch start-up
    persistent = claim_of("build_loader", figs, CONFIGS, BEST)
    assert not any("restart every epoch" in c for c in persistent.causes)


def test_a_run_s_first_epoch_is_apart_from_the_figures_and_said():
    """What a run pays once (persistent workers spawned, their first round) is in its first
    epoch: not in the claim's figure, as a long run pays it once, but reported."""
    figs = {
        "baseline": arm_figures("baseline", runs("baseline", [[200.0, 200.0]] * 2, first=200.0)),
        "build_loader": arm_figures(
            "build_loader", runs("build_loader", [[400.0, 400.0]] * 2, first=160.0)
        ),
    }
    claim = claim_of("build_loader", figs, CONFIGS, BEST)
    assert claim.verdict == HOLDS and claim.measured.value == pytest.approx(2.0)
    tuned = figs["build_loader"]
    assert tuned.first_epoch_slowdown == pytest.approx(2.5)
    assert tuned.first_epoch_extra_s == pytest.approx(64 / 160 - 64 / 400)  # 0.24 s
    assert figs["baseline"].first_epoch_extra_s == pytest.approx(0.0)
    # a run with no first epoch timed apart (one written before it was) reports none
    assert arm_figures("baseline", runs("baseline", [[200.0]])).first_epoch_extra_s is None


def test_differs_names_a_slow_first_round_as_the_page_cache():
    figs = figures(
        baseline=[[100.0, 100.0], [200.0, 200.0], [200.0, 200.0]], build_loader=[[500.0]] * 3
    )
    claim = claim_of("build_loader", figs, CONFIGS, BEST)
    assert claim.verdict == DIFFERS  # 2.5x measured against 2.0x claimed
    assert any(
        c.startswith(
            "page cache: the baseline arm's first timed epoch in the first round was 2.00x"
        )
        for c in claim.causes
    ), claim.causes


def test_differs_names_the_gap_to_best_yaml_s_own_figures():
    figs = figures(baseline=[[100.0]], build_loader=[[300.0]])
    claim = claim_of("build_loader", figs, CONFIGS, BEST)
    assert claim.verdict == DIFFERS
    assert any(c.startswith("the baseline ran at 100.0") and "0.50x" in c for c in claim.causes), (
        claim.causes
    )
    assert any(c.startswith("build_loader ran at 300.0") and "0.75x" in c for c in claim.causes)


def test_differs_without_a_visible_cause_says_so():
    figs = figures(baseline=[[200.0]], build_loader=[[420.0]])
    claim = claim_of("build_loader", figs, CONFIGS, best(speedup_vs_baseline=3.0))
    assert claim.verdict == DIFFERS
    assert claim.causes == ("no cause shows in the figures",)


def test_tail_share_is_the_excess_over_the_steady_rate():
    steady = epoch(100.0, samples=80, batches=10)
    assert tail_share(steady, 1) == pytest.approx(0.0, abs=1e-9)
    done = list(steady.step_done_s)
    slow_tail = steady.__class__(80, steady.seconds + 0.4, 0.0, (*done[:-1], done[-1] + 0.4))
    assert tail_share(slow_tail, 1) == pytest.approx(0.4 / 1.2)
    assert tail_share(epoch(100.0, samples=16, batches=2), 1) is None  # too short to tell


def test_quartiles_of_one_value_are_the_value():
    assert quartiles([3.0]) == (3.0, 3.0)
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 4.0)


def test_the_default_study_verifies_every_sample():
    """512 samples at the default study's rates fit in the budget whole."""
    per_sample = 2 / 200.0 + 1 / 450.0
    size, why = epoch_size(512, 3, 2, per_sample, 32)
    assert (size, why) == (512, "all samples")
    assert estimate_s(512, 3, 2, per_sample) < BUDGET_S


def test_a_big_dataset_gets_a_subset_that_fits_the_budget():
    per_sample = 2 / 200.0 + 1 / 450.0
    size, why = epoch_size(1_281_167, 3, 2, per_sample, 32)
    assert size % 32 == 0 and 1000 < size < 5000
    assert estimate_s(size, 3, 2, per_sample) <= BUDGET_S
    assert estimate_s(size + 32, 3, 2, per_sample) > BUDGET_S - 32 * 6 * per_sample
    assert "seeded subset" in why and "verify.samples=N" in why
    assert epoch_size(1_000_000, 50, 2, per_sample, 32)[0] == 8 * 32  # never below 8 batches
    assert epoch_size(100_000, 3, 2, None, 32)[0] == 2048  # no rates: a fixed subset
    assert RUN_OVERHEAD_S > 0
