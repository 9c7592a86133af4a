"""Each claim of best.yaml against the epochs: it holds when the claimed speedup is within 10 %
of the measured one or inside its interquartile range; else it differs, with the likely cause
where the figures show one."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.pipeline.best_file import BestFile
from autotune.pipeline.config import PipelineConfig
from autotune.verify.figures import ArmFigures

TOLERANCE = 0.10  # a claim within this share of the measured ratio holds
SLOW_FIRST = 1.25  # a first round this many times slower is named
STARTUP_SHARE = 0.15  # start-up above this share of every epoch is named
TAIL_SHARE = 0.10  # a tail above this share of the epoch (beyond the steady rate) is named
REFERENCE_GAP = 0.10  # an arm this far from best.yaml's own figure is named

HOLDS, DIFFERS = "holds", "differs"
NO_CLAIM = "no claim in best.yaml"
NOT_MEASURED = "not measured"
# the arms best.yaml makes a claim for: each one's speedup_vs_baseline
CLAIMED_ARMS = ("loader_kwargs", "build_loader")


def claimed_speedup(best: BestFile, arm: str) -> float | None:
    """best.yaml's claim for ``arm``: ``loader_kwargs.measured`` or ``measured``."""
    measured = best.as_is_measured if arm == "loader_kwargs" else best.measured
    return measured.speedup_vs_baseline


@dataclass(frozen=True)
class Ratio:
    """An arm's median over the baseline's, and its IQR ends over the baseline's median."""

    value: float
    iqr: tuple[float, float]


@dataclass(frozen=True)
class Claim:
    arm: str
    claimed: float | None
    measured: Ratio | None
    verdict: str
    causes: tuple[str, ...] = ()


def ratio_to_baseline(arm: ArmFigures, baseline: ArmFigures) -> Ratio:
    base = baseline.median
    return Ratio(arm.median / base, (arm.iqr[0] / base, arm.iqr[1] / base))


def judge(claimed: float | None, measured: Ratio) -> str:
    if claimed is None:
        return NO_CLAIM
    within = abs(claimed - measured.value) <= TOLERANCE * measured.value
    inside = measured.iqr[0] <= claimed <= measured.iqr[1]
    return HOLDS if within or inside else DIFFERS


def startup_causes(arm: ArmFigures, config: PipelineConfig) -> list[str]:
    """Start-up paid in every epoch (a run's first epoch, paid once, is not in the figures)."""
    if not config.workers_restart or arm.startup_share < STARTUP_SHARE:
        return []
    return [
        f"start-up not amortized: the {arm.arm} arm's workers restart every epoch "
        f"(persistent_workers off) and its first batch takes {arm.startup_share:.0%} of "
        "each epoch"
    ]


def tail_cause(arm: ArmFigures) -> list[str]:
    if arm.tail_share is None or arm.tail_share < TAIL_SHARE:
        return []
    return [
        f"the epoch tail: the {arm.arm} arm's last batches take {arm.tail_share:.0%} of each "
        "epoch beyond its steady rate (the tuner's endless window has no tail)"
    ]


def page_cache_causes(*arms: ArmFigures) -> list[str]:
    return [
        f"page cache: the {arm.arm} arm's first timed epoch in the first round was "
        f"{arm.first_round_slowdown:.2f}x slower than in its later rounds (files read from "
        "storage before they were cached, or the machine busier then)"
        for arm in arms
        if arm.first_round_slowdown is not None and arm.first_round_slowdown >= SLOW_FIRST
    ]


def reference_causes(arm: ArmFigures, baseline: ArmFigures, best: BestFile) -> list[str]:
    """Where an arm's rate is far from best.yaml's own figure for it."""
    causes = []
    tuned_baseline = best.measured.baseline_samples_per_s
    if tuned_baseline and abs(baseline.median / tuned_baseline - 1) > REFERENCE_GAP:
        causes.append(
            f"the baseline ran at {baseline.median:.1f} samples/s over real epochs; best.yaml "
            f"says {tuned_baseline:.1f}: {baseline.median / tuned_baseline:.2f}x"
        )
    measured = best.as_is_measured if arm.arm == "loader_kwargs" else best.measured
    own = measured.samples_per_s
    if own and abs(arm.median / own - 1) > REFERENCE_GAP:
        causes.append(
            f"{arm.arm} ran at {arm.median:.1f} samples/s over real epochs; best.yaml "
            f"says {own:.1f}: {arm.median / own:.2f}x"
        )
    return causes


def likely_causes(
    arm: ArmFigures,
    baseline: ArmFigures,
    configs: dict[str, PipelineConfig],
    best: BestFile,
) -> tuple[str, ...]:
    """What the figures show that moves the arm's ratio: its own shapes and the baseline's,
    and how far each is from best.yaml's own figure."""
    causes = [
        *startup_causes(baseline, configs["baseline"]),
        *startup_causes(arm, configs[arm.arm]),
        *tail_cause(baseline),
        *tail_cause(arm),
        *page_cache_causes(baseline, arm),
        *reference_causes(arm, baseline, best),
    ]
    return tuple(causes) or ("no cause shows in the figures",)


def claim_of(
    arm: str,
    figures: dict[str, ArmFigures | None],
    configs: dict[str, PipelineConfig],
    best: BestFile,
) -> Claim:
    """The verdict on best.yaml's claim for ``arm`` (or its ratio, where it claims nothing);
    ``configs``: each arm's loader settings."""
    claimed = claimed_speedup(best, arm)
    own, baseline = figures.get(arm), figures.get("baseline")
    if own is None or baseline is None or baseline.median <= 0:
        return Claim(arm, claimed, None, NOT_MEASURED)
    ratio = ratio_to_baseline(own, baseline)
    verdict = judge(claimed, ratio)
    causes = likely_causes(own, baseline, configs, best) if verdict == DIFFERS else ()
    return Claim(arm, claimed, ratio, verdict, causes)
