"""The winner's one-setting variants: which settings are put back, what each change implies,
the order they are measured in."""

from __future__ import annotations

import dataclasses

import optuna
from winner_data import BASELINE, DECODERS, TUNED, WINNER_CONFIG

from autotune.pipeline.config import PipelineConfig
from autotune.tuner.variants import decoders_ranked, variants


def _changed(a: PipelineConfig, b: PipelineConfig) -> set[str]:
    return {f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}


def test_each_variant_changes_one_setting_of_the_winner():
    ranked = ["pil", "torchvision", "opencv", "as_is"]
    out = variants(WINNER_CONFIG, BASELINE, tuned=TUNED, decoders_ranked=ranked)
    assert [v.label for v in out] == [
        "decoder=pil",  # the best other decoder first: what reducing is worth
        "main_threads=2",  # torch's own thread count, as the baseline runs
        "persistent_workers=False",
        "num_workers=0",
        "prefetch_factor=2",
        "decoder=torchvision",
        "decoder=opencv",
        "decoder=as_is",  # the user's pipeline as it is, at the winner's loader settings
    ]
    for v in out:
        assert _changed(v.config, WINNER_CONFIG) == {v.knob, *v.also_changed}, v.label
    implied = {v.label: v.also_changed for v in out if v.also_changed}
    # no workers: DataLoader refuses a prefetch factor and persistence; the Dataset as it is
    # brings its own transfer and keeps every sample
    assert implied == {
        "num_workers=0": ("persistent_workers", "prefetch_factor"),
        "decoder=as_is": ("drop_last", "transfer"),
    }


def test_settings_the_space_fixes_are_not_put_back():
    # a CPU space: no transfer, pin_memory...; the winner's uint8 transfer is not the tuner's
    out = variants(WINNER_CONFIG, BASELINE, tuned=["num_workers"], decoders_ranked=[])
    assert [v.label for v in out] == ["num_workers=0"]


def test_a_dali_winner_is_not_compared_with_a_dataloader_decoder():
    dali = PipelineConfig(batch_size=32, decoder="dali", main_threads=1)
    out = variants(dali, BASELINE, tuned=TUNED, decoders_ranked=["pil", "opencv"])
    assert [v.label for v in out] == ["main_threads=2"]


def test_the_decoders_are_ranked_full_decodes_first_for_a_reducing_winner():
    study = optuna.create_study(direction="maximize")
    for decoder, value in (("pil", 300.0), ("opencv", 350.0), ("as_is", 400.0)):
        config = PipelineConfig(batch_size=32, decoder=decoder)
        study.add_trial(
            optuna.trial.create_trial(
                value=value,
                params={},
                distributions={},
                user_attrs={"pipeline": config.to_dict()},
            )
        )
    ranked = decoders_ranked(study, WINNER_CONFIG, DECODERS)
    assert ranked == ["opencv", "pil", "torchvision", "as_is"]


def test_a_switch_the_winner_leaves_off_is_turned_on():
    """Folklore says "always persistent workers": the row says what it is worth here."""
    transient = dataclasses.replace(WINNER_CONFIG, persistent_workers=False)
    out = variants(transient, BASELINE, tuned=TUNED, decoders_ranked=[])
    assert [v.label for v in out] == [
        "main_threads=2",
        "persistent_workers=True",
        "num_workers=0",
        "prefetch_factor=2",
    ]
    no_workers = PipelineConfig(batch_size=32, decoder="pil", main_threads=2)
    assert variants(no_workers, BASELINE, tuned=TUNED, decoders_ranked=[]) == []


def test_torch_s_own_thread_count_beside_workers_is_tried_at_one_thread():
    """Folklore says one main thread when workers decode: the row says what it is worth."""
    own_threads = dataclasses.replace(WINNER_CONFIG, main_threads=2)
    out = variants(own_threads, BASELINE, tuned=TUNED, decoders_ranked=[])
    assert [v.label for v in out][0] == "main_threads=1"
    assert _changed(out[0].config, own_threads) == {"main_threads"}


def test_a_prepared_copy_is_put_back_first():
    cached = dataclasses.replace(WINNER_CONFIG, cache="decoded")
    out = variants(cached, BASELINE, tuned=["cache", *TUNED], decoders_ranked=DECODERS[1:])
    assert cached.decoder == "pil"  # decoded pixels: every decoder is one config, pil's
    assert out[0].label == "cache=none"  # decoded with pil, as the copy was made
    assert _changed(out[0].config, cached) == {"cache"} and not out[0].also_changed


def test_a_winner_out_of_order_is_put_back_in_order_and_without_workers_in_order_too():
    winner = dataclasses.replace(WINNER_CONFIG, in_order=False)
    out = variants(winner, BASELINE, tuned=[*TUNED, "in_order"], decoders_ranked=[])
    rows = {v.label: v for v in out}
    assert _changed(rows["in_order=True"].config, winner) == {"in_order"}
    assert rows["num_workers=0"].config.in_order is True  # DataLoader's only value without
    assert "in_order" in rows["num_workers=0"].also_changed
