"""Tests for the Hydra configs: the real ``conf/`` composed, converted and validated."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import config_of
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from autotune.errors import UsageError
from autotune.schema import AutotuneConfig, WindowConfig

# A bad override may surface as Hydra's or OmegaConf's own error, or as our UsageError.
BAD_INPUT = (UsageError, HydraException, OmegaConfBaseException)


def load(*overrides: str) -> AutotuneConfig:
    return config_of(overrides)


# --- defaults ---------------------------------------------------------------------------------


def test_defaults() -> None:
    cfg = load()
    assert cfg.dataset.name == "synthetic"
    assert cfg.dataset.kind == "synthetic"
    assert cfg.model.name == "tiny"
    assert cfg.recipe.name == "imagenet_train"
    assert cfg.search_space.name == "default"
    assert cfg.study.name == "synthetic-tiny"
    assert cfg.study.storage == "sqlite:///studies/autotune.db"
    assert load("studies_dir=/runs").study.storage == "sqlite:////runs/autotune.db"  # follows it
    assert cfg.window == WindowConfig()  # conf/window/default.yaml matches the schema defaults
    assert cfg.device == "auto"
    assert cfg.batch_size == 32


def test_default_space_batch_size_follows_the_root_value() -> None:
    knobs = load("batch_size=8").search_space.knobs
    assert knobs["batch_size"].type == "fixed"
    assert knobs["batch_size"].value == 8


# --- overrides --------------------------------------------------------------------------------


def test_common_overrides_exist() -> None:
    cfg = load(
        "study.n_trials=5",
        "study.timeout=30",
        "study.name=mystudy",
        "study.storage=sqlite:///elsewhere.db",
        "recipe.crop_size=64",
        "batch_size=8",
        "device=cpu",
    )
    assert cfg.study.n_trials == 5
    assert cfg.study.timeout == 30
    assert cfg.study.name == "mystudy"
    assert cfg.study.storage == "sqlite:///elsewhere.db"
    assert cfg.recipe.crop_size == 64
    assert cfg.batch_size == 8
    assert cfg.device == "cpu"


def test_dataset_root_with_dataset_mine() -> None:
    cfg = load("dataset=mine", "dataset.root=/data/images")
    assert cfg.dataset.kind == "imagefolder"
    assert cfg.dataset.root == "/data/images"
    assert cfg.study.name == "mine-tiny"


def test_model_option_names_the_study() -> None:
    cfg = load("model=resnet50")
    assert cfg.model.name == "resnet50"
    assert cfg.study.name == "synthetic-resnet50"


def test_custom_model_target_gets_its_own_name() -> None:
    cfg = load("model._target_=torchvision.models.resnet34")
    assert cfg.model._target_ == "torchvision.models.resnet34"
    assert cfg.model.name == "resnet34"
    assert cfg.study.name == "synthetic-resnet34"


def test_custom_model_target_keeps_an_explicit_name() -> None:
    cfg = load("model._target_=torchvision.models.resnet34", "model.name=r34")
    assert cfg.model.name == "r34"


def test_users_own_new_dataset_file_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf/dataset").mkdir(parents=True)
    (tmp_path / "conf/dataset/photos.yaml").write_text(
        "name: photos\nkind: imagefolder\nroot: /some/path\n"
    )
    monkeypatch.chdir(tmp_path)
    cfg = load("dataset=photos")
    assert cfg.dataset.root == "/some/path"
    assert cfg.study.name == "photos-tiny"


def test_users_own_mine_yaml_is_found_without_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf/dataset").mkdir(parents=True)
    (tmp_path / "conf/dataset/mine.yaml").write_text(
        "name: mine\nkind: imagefolder\nroot: /some/path\n"
    )
    monkeypatch.chdir(tmp_path)
    cfg = load("dataset=mine")
    assert cfg.dataset.root == "/some/path"


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "mentions"),
    [
        ("model=nope", "nope"),  # unknown group option
        ("study.nope=1", "nope"),  # unknown key
        ("study.n_trials=abc", "n_trials"),  # wrong type
    ],
)
def test_bad_overrides_are_refused(override: str, mentions: str) -> None:
    with pytest.raises(BAD_INPUT, match=mentions):
        load(override)


def test_unknown_device_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="device must be auto, cpu or cuda"):
        load("device=gpu")


def test_tiny_crop_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="recipe.crop_size"):
        load("recipe.crop_size=2")


@pytest.mark.parametrize(
    ("override", "mentions"),
    [("study.n_trials=0", "study.n_trials"), ("study.timeout=-1", "study.timeout")],
)
def test_study_rules_are_usage_errors(override: str, mentions: str) -> None:
    with pytest.raises(UsageError, match=mentions):
        load(override)


@pytest.mark.parametrize("dataset", ["mine", "imagefolder"])
def test_imagefolder_without_root_is_a_usage_error(dataset: str) -> None:
    with pytest.raises(UsageError, match="dataset.root"):
        load(f"dataset={dataset}")


def test_ranks_are_a_whole_number_or_auto_and_only_tuned() -> None:
    assert load("ranks=2").ranks == 2 and load("ranks=auto").ranks == "auto"
    for bad, words in (("ranks=0", "ranks must be"), ("ranks=two", "ranks must be")):
        with pytest.raises(UsageError, match=words):
            load(bad)
    with pytest.raises(UsageError, match="mode=verify times one process: run it with ranks=1"):
        load("ranks=2", "mode=verify")


def test_the_worth_table_s_old_key_names_are_read_with_a_deprecation_note() -> None:
    budget = "study.ablation_budget is deprecated: use study.worth_budget"
    rounds = "study.ablation_rounds is deprecated: use study.worth_rounds"
    with pytest.warns(FutureWarning, match=budget), pytest.warns(FutureWarning, match=rounds):
        cfg = load("study.ablation_budget=0", "study.ablation_rounds=2")
    assert (cfg.study.worth_budget, cfg.study.worth_rounds) == (0, 2)
    assert load("study.worth_budget=0.5").study.worth_budget == 0.5
