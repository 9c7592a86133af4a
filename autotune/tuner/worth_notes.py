"""The sentences the report says from the worth table: what reduced decode bought, what
beat the winner, what the prepared copy costs and buys. Each compares configs that differ in
one setting, measured in the same rounds."""

from __future__ import annotations

from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.tuner.metrics import Confirmed
from autotune.tuner.variants import reduces
from autotune.tuner.worth import WorthTable


def reduced_decode_note(worth: WorthTable, winner: PipelineConfig) -> str | None:
    """What decoding at reduced size bought: the winner against itself at the fastest full
    decode, nothing else changed."""
    if not (reduces(winner.decoder) and winner.augment_on == "cpu"):
        return None
    full = [
        r
        for r in worth.rows
        if r["knob"] == "decoder"
        and r["value"] != AS_IS
        and not reduces(r["value"])
        and not r["also_changed"]
    ]
    if not full:
        return None
    best = max(full, key=lambda r: r["samples_per_s"])
    if best["verdict"] == "none":
        return (
            f"reduced decode ({winner.decoder}) has no measurable effect against full decode "
            f"({best['value']}) at the winner's other settings"
        )
    ratio = best["winner_samples_per_s"] / best["samples_per_s"]
    return (
        f"reduced decode ({winner.decoder}) is {ratio:.2f}x the winner at full decode "
        f"({best['value']}, nothing else changed)"
    )


def faster_note(worth: WorthTable) -> str | None:
    """The variants that beat the winner beyond the spread, measured in the same rounds, and
    what became of the fastest: queued as the study's next trial (the pick is not changed on
    one round's word), or the search's own trial of it named."""
    faster = [r for r in worth.rows if r["verdict"] == "faster"]
    if not faster:
        return None
    named = ", ".join(
        f"{r['label']} ({r['samples_per_s'] / r['winner_samples_per_s']:.2f}x)" for r in faster
    )
    said = (
        f"the winner with {named} measured faster than the winner in the same rounds, beyond "
        "the spread"
    )
    queued = worth.queued or {}
    if "n_trials" in queued:
        return (
            f"{said}: the search never tried {queued['label']}; it is queued as the study's "
            f"next trial: run again with study.n_trials={queued['n_trials']} to measure it "
            "there and confirm it beside the winner"
        )
    if "searched_as" in queued:
        return (
            f"{said}: the search measured {queued['label']} as trial {queued['searched_as']}; "
            "one round does not overturn the confirmed pick"
        )
    return f"{said}: the search did not find it; raise study.n_trials and run again to search it"


def prepared_copy_note(
    worth: WorthTable | None, winner: Confirmed, seconds: float, epochs: int
) -> str | None:
    """What the winner's prepared copy costs and buys over ``study.epochs``: its preparation
    time, and against the winner without it (nothing else changed, the same rounds) where
    that was measured, the epochs after which it pays for itself."""
    cache = winner.config.cache
    if cache == "none":
        return None
    said = (
        f"the {cache} copy took {seconds:.1f} s to prepare, once: {seconds / epochs:.2f} s "
        f"charged to each of the study.epochs={epochs} planned"
    )
    rows = [r for r in worth.rows if r["knob"] == "cache"] if worth else []
    row = next((r for r in rows if r["value"] == "none" and not r["also_changed"]), None)
    if row is None or not winner.epoch_samples:
        return said
    samples = winner.epoch_samples
    epoch_cached = samples / row["winner_samples_per_s"] - seconds / epochs  # uncharged
    epoch_plain = samples / row["samples_per_s"]
    if row["verdict"] == "none" or epoch_plain <= epoch_cached:
        return f"{said}; without it (cache=none, nothing else changed) no slower: it never pays"
    ratio = row["winner_samples_per_s"] / row["samples_per_s"]
    return (
        f"{said}; charged so, the winner is {ratio:.2f}x itself without it (cache=none, "
        f"nothing else changed), and the copy pays for itself after "
        f"{seconds / (epoch_plain - epoch_cached):.1f} epochs"
    )
