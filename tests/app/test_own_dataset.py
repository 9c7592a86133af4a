"""A Dataset of the user's own, named on the command line alone, tuned end to end from the
user's working directory: real CPU work in its ``__getitem__``, a padding collate, a model by
``_target_``."""

from __future__ import annotations

import pytest
import torch
import yaml
from helpers import run_cli
from userdata_example import Spectrograms, pad_collate

from autotune.app import cli
from autotune.pipeline.user_data import UserData
from autotune.session import Session

OWN = [
    "window=quick",
    "study.n_trials=5",
    "study.n_startup_trials=2",
    "study.confirm_top_k=1",
    "study.confirm_rounds=1",
    "study.worth_budget=0",  # no worth table: not what these tests check
    "batch_size=8",
    "dataset._target_=userdata_example.Spectrograms",
    "dataset.kwargs.count=48",  # no "+": kwargs take any key
    "dataset.kwargs.vary=true",
    "dataset.collate_fn=userdata_example.pad_collate",
    "model._target_=userdata_example.SpecNet",
]


@pytest.mark.slow
def test_a_dataset_of_the_user_s_own_is_tuned_as_it_is(tmp_path) -> None:
    result = run_cli(OWN, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "48 samples of userdata_example.Spectrograms(count=48, vary=True)" in out
    assert "left out: your own Dataset is read as it is" in out
    best = yaml.safe_load(
        (tmp_path / "studies" / "spectrograms-specnet" / "best.yaml").read_text()
    )
    # its names recorded, never its contents
    assert best["workload"]["dataset_target"] == {
        "_target_": "userdata_example.Spectrograms",
        "kwargs": {"count": 48, "vary": True},
        "collate_fn": "userdata_example.pad_collate",
    }
    assert best["baseline"].startswith(
        "userdata_example.Spectrograms(count=48, vary=True), "
        "collate_fn=userdata_example.pad_collate as it is; DataLoader(dataset, batch_size=8"
    )
    assert best["pipeline"]["decoder"] == "as_is"  # nothing of the tuner's to decode
    loader = torch.utils.data.DataLoader(
        Spectrograms(count=48, vary=True),
        shuffle=True,
        collate_fn=pad_collate,
        **best["loader_kwargs"]["loader"],
    )
    specs, labels = next(iter(loader))
    assert specs.shape[0] == labels.shape[0] == 8
    assert best["loader_kwargs"]["measured"]["speedup_vs_baseline"] >= 1.0


def test_the_same_keys_in_the_user_s_own_conf_file(tmp_path, monkeypatch) -> None:
    own = tmp_path / "conf" / "dataset" / "mine.yaml"
    own.parent.mkdir(parents=True)
    own.write_text(
        "name: mine\n_target_: userdata_example.Spectrograms\nkwargs: {count: 24, vary: true}\n"
        "collate_fn: userdata_example.pad_collate\n"
    )
    monkeypatch.chdir(tmp_path)
    overrides = ["dataset=mine", "model._target_=userdata_example.SpecNet"]
    session = Session.build(cli.to_config(cli.compose(overrides)))
    assert isinstance(session.source, UserData) and len(session.source) == 24
    assert session.source.collate_fn == "userdata_example.pad_collate"
    assert session.conf.study.name == "mine-specnet"  # its own name, from its file


@pytest.mark.slow
def test_a_lightning_datamodule_and_module_are_tuned_end_to_end(tmp_path) -> None:
    """The shape of the Lightning + Hydra template: the DataModule's train_dataloader()
    (its Dataset, dict collate and batch size) stepped by the LightningModule's own
    training_step and configure_optimizers."""
    quick = [o for o in OWN if not o.startswith(("dataset.", "model.", "batch_size"))]
    args = [
        *quick,
        "dataset._target_=lightning_example.ToneData",
        "model._target_=lightning_example.ToneModule",
        "precision=bf16",
    ]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "batch size 16: the DataModule's train_dataloader()" in result.stdout
    best = yaml.safe_load((tmp_path / "studies" / "tonedata-tonemodule" / "best.yaml").read_text())
    assert best["loader_kwargs"]["loader"]["batch_size"] == 16
    assert best["loader_kwargs"]["measured"]["speedup_vs_baseline"] >= 1.0
