"""The worth table's sentences: each compares configs that differ in one setting."""

from __future__ import annotations

import dataclasses

from helpers import make_session
from winner_data import BASELINE, WINNER_CONFIG, fake_run, search_of, winner

from autotune.tuner.metrics import Confirmed
from autotune.tuner.worth import WorthTable, measure_worth
from autotune.tuner.worth_notes import faster_note, prepared_copy_note, reduced_decode_note


def test_reduced_decode_worth_is_said_against_the_full_decode():
    session = make_session(["study.epoch_aware=false", "study.worth_budget=10"])
    slower = {"decoder=pil": 300.0, "decoder=opencv": 400.0, "decoder=torchvision": 350.0}
    search = search_of([10.0] * 40)
    worth = measure_worth(session, search, winner(), BASELINE, run=fake_run([], slower))
    assert worth is not None
    assert reduced_decode_note(worth, WINNER_CONFIG) == (
        "reduced decode (pil_reduced) is 1.25x the winner at full decode (opencv, nothing "
        "else changed)"
    )


def test_a_faster_variant_is_said_with_what_became_of_it():
    row = {
        "label": "persistent_workers=True",
        "verdict": "faster",
        "samples_per_s": 540.0,
        "winner_samples_per_s": 500.0,
    }
    table = WorthTable({"samples_per_s": 500.0}, (row,), (), 1.0, 10.0, 0.25)
    said = (
        "the winner with persistent_workers=True (1.08x) measured faster than the winner in "
        "the same rounds, beyond the spread: "
    )
    queued = {"label": "persistent_workers=True", "n_trials": 21}
    assert faster_note(dataclasses.replace(table, queued=queued)) == said + (
        "the search never tried persistent_workers=True; it is queued as the study's next "
        "trial: run again with study.n_trials=21 to measure it there and confirm it beside "
        "the winner"
    )
    searched = {"label": "persistent_workers=True", "searched_as": 12}
    assert faster_note(dataclasses.replace(table, queued=searched)) == said + (
        "the search measured persistent_workers=True as trial 12; one round does not "
        "overturn the confirmed pick"
    )
    assert faster_note(dataclasses.replace(table, rows=({**row, "verdict": "none"},))) is None


def test_a_prepared_copy_is_said_with_its_cost_and_its_break_even():
    """60 s of preparation over 90 epochs of 3,200 samples: 0.67 s charged to each; the
    winner 400 samples/s so charged, 200 without its copy: 8 s an epoch against 16 s - 0.67."""
    cached = dataclasses.replace(WINNER_CONFIG, cache="decoded")
    copied = Confirmed("trial 7", 7, cached, (400.0,), epoch_samples=3200)
    row = {
        "knob": "cache",
        "value": "none",
        "also_changed": [],
        "verdict": "worth",
        "samples_per_s": 200.0,
        "winner_samples_per_s": 400.0,
    }
    table = WorthTable({"samples_per_s": 400.0}, (row,), (), 1.0, 10.0, 0.25)
    note = prepared_copy_note(table, copied, 60.0, 90)
    assert note.startswith("the decoded copy took 60.0 s to prepare, once: 0.67 s charged")
    # uncharged, the cached epoch is 8 - 0.67 = 7.33 s; without it 16 s: 60 / 8.67 = 6.9
    assert note.endswith(
        "the winner is 2.00x itself without it (cache=none, nothing else "
        "changed), and the copy pays for itself after 6.9 epochs"
    )
    assert prepared_copy_note(None, copied, 60.0, 90).endswith(
        "each of the study.epochs=90 planned"
    )
    assert prepared_copy_note(table, winner(), 60.0, 90) is None  # no copy, nothing said
    level = {**row, "verdict": "none", "samples_per_s": 399.0}
    assert prepared_copy_note(
        dataclasses.replace(table, rows=(level,)), copied, 60.0, 90
    ).endswith("no slower: it never pays")
