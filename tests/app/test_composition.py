"""Tests for autotune.app.composition: the config composed from the group overrides once, the
value overrides applied to a copy by Hydra's own last step, is the config Hydra composes
from all of them at once; and a change to ./conf's files is composed again."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from autotune.app import composition

# every kind of override a user or a test writes: group and value, added, forced, deleted,
# lists, null, quoted, an open key of the user's own class, an old key renamed, in any order
OVERRIDES = [
    [],
    ["batch_size=8"],
    ["window=quick", "batch_size=8", "study.n_trials=3", "window.max_timed_s=4"],
    ["study.n_trials=3", "window=quick"],  # a value before the group it lands in
    ["dataset=mine", "dataset.root=/data/train", "model=resnet50"],
    ["dataset._target_=userdata_example.Spectrograms", "dataset.kwargs.root=/x y"],
    ["search_space.knobs.num_workers.type=choice", "search_space.knobs.num_workers.choices=[0,1]"],
    ["study.timeout=null", "study.name='a b'", "pipeline=null", "seed=${batch_size}"],
    ["+extra=1", "++study.n_trials=9", "+dataset.kwargs.tag=x", "~extra"],
    ["study.ablation_budget=0.5", "model.name=mine", "model._target_=torch.nn.Linear"],
]
# each refused by Hydra, in the same words
BAD = [
    ["study.nope=1"],
    ["+batch_size=2"],
    ["~study.nothing"],
    ["study.n_trials=abc"],
    ["batch_size=1,2"],
    ["dataset=no_such"],
    ["study.n_trials"],
    ["study.storage=null"],
    ["~diagnose.slowest"],
]


def hydra_alone(overrides: list[str]) -> DictConfig:
    """Hydra's composition of every override at once (none applied to a copy)."""
    every = composition._open_keys([composition._renamed(o) for o in overrides])
    # a deep copy: _own_names renames inside sections, which a shallow one shares with the cache
    cfg = copy.deepcopy(composition._composed(tuple(every), Path("conf").resolve(), ()))
    composition._own_names(cfg, every)
    return cfg


@pytest.mark.slow  # each case is two compositions by Hydra: half a second each
@pytest.mark.filterwarnings("ignore:study.ablation_budget is deprecated")
@pytest.mark.parametrize("overrides", OVERRIDES, ids=" ".join)
def test_the_config_is_hydra_s_own(overrides: list[str]) -> None:
    expected = OmegaConf.to_yaml(hydra_alone(overrides))
    assert OmegaConf.to_yaml(composition.compose(overrides)) == expected
    assert OmegaConf.to_yaml(composition.compose(overrides)) == expected  # again, from memory


@pytest.mark.slow
@pytest.mark.parametrize("overrides", BAD, ids=" ".join)
def test_bad_overrides_are_refused_in_hydra_s_words(overrides: list[str]) -> None:
    with pytest.raises(Exception) as alone:
        hydra_alone(overrides)
    with pytest.raises(type(alone.value)) as split:
        composition.compose(overrides)
    assert str(split.value) == str(alone.value)


def test_each_config_is_a_copy() -> None:
    first = composition.compose(["window=quick"])
    first.window.max_timed_s = 999
    assert composition.compose(["window=quick"]).window.max_timed_s != 999


def test_a_changed_file_of_conf_is_composed_again(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    mine = tmp_path / "conf" / "dataset" / "mine.yaml"
    mine.write_text("name: first\nkind: imagefolder\nroot: /a\n")
    assert composition.compose(["dataset=mine"]).dataset.name == "first"
    mine.write_text("name: second\nkind: imagefolder\nroot: /abc\n")
    os.utime(mine, ns=(1, 1))  # the time of change alone may not tell within a clock tick
    assert composition.compose(["dataset=mine"]).dataset.name == "second"


def test_values_alone_reuse_the_groups_composed_before() -> None:
    composition.compose(["window=quick"])
    before = composition._composed.cache_info().misses
    for n in range(3, 6):
        assert composition.compose(["window=quick", f"study.n_trials={n}"]).study.n_trials == n
    assert composition._composed.cache_info().misses == before  # Hydra read no file again
