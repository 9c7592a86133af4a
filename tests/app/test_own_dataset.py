"""A Dataset of the user's own, named on the command line alone, tuned, verified and diagnosed
end to end from the user's working directory: real files and real CPU work in its
``__getitem__``, a padding collate, a model by ``_target_``."""

from __future__ import annotations

import json
import re

import pytest
import torch
import yaml
from helpers import QUICK_WINDOW, run_cli
from userdata_example import WavFiles, pad_collate, write_wavs

from autotune.app import composition
from autotune.pipeline.user_data import UserData
from autotune.session import Session

OWN = [
    *QUICK_WINDOW,
    "study.n_trials=3",  # the commands run through: the figures are the quick study's
    "study.n_startup_trials=2",
    "study.confirm_top_k=1",
    "study.confirm_rounds=1",
    "study.worth_budget=0",  # no worth table: not what these tests check
    "batch_size=8",
    "dataset._target_=userdata_example.WavFiles",  # dataset.kwargs.root: where it wrote them
    "dataset.collate_fn=userdata_example.pad_collate",
    "model._target_=userdata_example.SpecNet",
]


@pytest.mark.slow
def test_a_dataset_of_the_user_s_own_is_tuned_verified_and_diagnosed(tmp_path) -> None:
    """WAV files read by the user's own Dataset: tuned, then ``mode=verify`` and
    ``mode=diagnose`` with the same overrides, on the same study."""
    clips = write_wavs(tmp_path / "clips", 48)
    own = [*OWN, f"dataset.kwargs.root={clips}"]
    result = run_cli(own, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert f"48 samples of userdata_example.WavFiles(root='{clips}')" in out
    assert "left out: your own Dataset is read as it is" in out
    # its read and collate, profiled: what no number of workers can exceed
    assert re.search(r"CPU-work bound \(as_is\)\s+[\d.]+\s+the loader's CPU work", out)
    folder = tmp_path / "studies" / "wavfiles-specnet"
    best = yaml.safe_load((folder / "best.yaml").read_text())
    # its names recorded, never its contents
    assert best["workload"]["dataset_target"] == {
        "_target_": "userdata_example.WavFiles",
        "kwargs": {"root": str(clips)},
        "collate_fn": "userdata_example.pad_collate",
    }
    assert best["baseline"].startswith(
        f"userdata_example.WavFiles(root='{clips}'), collate_fn=userdata_example.pad_collate "
        "as it is; DataLoader(dataset, batch_size=8"
    )
    assert best["pipeline"]["decoder"] == "as_is"  # nothing of the tuner's to decode
    loader = torch.utils.data.DataLoader(
        WavFiles(clips), shuffle=True, collate_fn=pad_collate, **best["loader_kwargs"]["loader"]
    )
    specs, labels = next(iter(loader))
    assert specs.shape[0] == labels.shape[0] == 8
    assert best["loader_kwargs"]["measured"]["speedup_vs_baseline"] >= 1.0

    verified = run_cli([*own, "mode=verify", "verify.rounds=2", "verify.epochs=1"], tmp_path)
    assert verified.returncode == 0, verified.stderr[-3000:]
    report = json.loads((folder / "verify.json").read_text())
    assert list(report["arms"]) == ["baseline", "loader_kwargs"]  # no build_loader: as it is
    assert report["arms"]["baseline"]["what"].startswith("`userdata_example.WavFiles(root=")
    (claim,) = report["claims"]
    assert claim["arm"] == "loader_kwargs" and claim["verdict"] in ("holds", "differs")
    assert claim["claimed"] == best["loader_kwargs"]["measured"]["speedup_vs_baseline"]
    ran = {run["arm"]: run["times"] for run in report["runs"]}
    assert (
        ran["baseline"]["dataset"]
        == ran["loader_kwargs"]["dataset"]
        == ("userdata_example.WavFiles")
    )
    assert all(times["epochs"][0]["samples"] == 48 for times in ran.values())

    diagnosed = run_cli([*own, "mode=diagnose", "diagnose.samples=24"], tmp_path)
    assert diagnosed.returncode == 0, diagnosed.stderr[-3000:]
    text = (folder / "diagnosis.md").read_text()
    verdict = next(line for line in text.splitlines() if line.startswith("**Verdict.**"))
    assert verdict in diagnosed.stdout
    assert re.search(r"(data|compute)-bound: the model waits (only )?\d+% of each step", verdict)
    # which limit binds: the ceiling, the CPU work, or reads that wait (then with its figure)
    limits = r"\((ceiling binds|CPU-work bound binds|waiting reads bind: [^)]+ samples/s)\)"
    assert re.search(limits, verdict), verdict
    for row in ("your Dataset's read", "collate", "train step"):
        assert re.search(rf"^\| {re.escape(row)}[^|]* \| [\d.]+ \| [\d.]+ \|", text, re.M), row
    assert "| slowest samples | ms |" in text


def test_the_same_keys_in_the_user_s_own_conf_file(tmp_path, monkeypatch) -> None:
    own = tmp_path / "conf" / "dataset" / "mine.yaml"
    own.parent.mkdir(parents=True)
    own.write_text(
        "name: mine\n_target_: userdata_example.Spectrograms\nkwargs: {count: 24, vary: true}\n"
        "collate_fn: userdata_example.pad_collate\n"
    )
    monkeypatch.chdir(tmp_path)
    overrides = ["dataset=mine", "model._target_=userdata_example.SpecNet"]
    session = Session.build(composition.to_config(composition.compose(overrides)))
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
