"""``autotune.tune``: the arguments become the command line's overrides; what a trial's
process could not import by name is refused in one line, before anything runs."""

from __future__ import annotations

import pytest
import userdata_example
from helpers import QUICK_WINDOW
from userdata_example import SpecNet, Spectrograms, pad_collate

import autotune
from autotune.app import composition
from autotune.app import from_python as api
from autotune.errors import UsageError


def test_given_values_reach_the_config_verbatim_and_objects_by_name(tmp_path) -> None:
    config = composition.to_config(
        composition.compose(["dataset._target_=userdata_example.Spectrograms"])
    )
    given = {
        "kwargs": {"dataset": {"root": tmp_path / "a b", "tag": "it's C:\\d ${x}"}, "model": None},
        "study": {"name": "it's", "storage": None},
        "studies_dir": "runs",
    }
    placed = api._with_given(config, given)
    assert placed.dataset.kwargs == {"root": str(tmp_path / "a b"), "tag": "it's C:\\d ${x}"}
    assert (placed.study.name, placed.study.storage) == ("it's", "sqlite:///runs/autotune.db")
    assert placed.studies_dir == "runs" and placed.model == config.model
    chosen = {**given, "study": {"name": None, "storage": "sqlite:///mine.db"}}
    assert api._with_given(config, chosen).study.storage == "sqlite:///mine.db"
    with pytest.raises(UsageError, match="dataset_kwargs: <object object at .*> is not a plain"):
        api._with_given(config, {**given, "kwargs": {"dataset": {"x": object()}}})
    assert api._name(pad_collate, "collate_fn") == "userdata_example.pad_collate"
    assert autotune.tune is api.tune  # the public name, imported when first asked for


def test_a_bad_override_is_one_line_before_anything_runs(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as info:
        autotune.tune(Spectrograms, model="resnet34", n_trials=1)
    assert "model/resnet34" in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_what_a_trial_could_not_import_is_one_line(tmp_path, monkeypatch) -> None:
    class Local(SpecNet):
        pass

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="is defined in a function's body: trials import it"):
        autotune.tune(Spectrograms, model=Local, collate_fn=pad_collate, n_trials=1)
    main = type("Clips", (Spectrograms,), {"__module__": "__main__"})
    with pytest.raises(UsageError, match="'Clips' is defined in this script or notebook"):
        autotune.tune(main, model=SpecNet, n_trials=1)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_dataset_object_is_checked_and_named_by_its_class(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="its samples cannot be batched"):
        autotune.tune(Spectrograms(count=8, vary=True), model=SpecNet, n_trials=1)
    with pytest.raises(UsageError, match="Locked cannot be pickled to the trials' processes"):
        autotune.tune(userdata_example.Locked(), model=SpecNet, n_trials=1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_stream_object_with_dict_batches_and_its_own_loss_is_tuned(tmp_path, monkeypatch):
    """An iterable Dataset handed over as an object (pickled to each trial), batched into
    dicts, stepped by the user's loss in bf16 with AdamW."""
    monkeypatch.chdir(tmp_path)
    tuned = autotune.tune(
        userdata_example.ToneStream(count=48),
        collate_fn=userdata_example.pad_dict_collate,
        model=SpecNet,
        step=userdata_example.smoothed_loss,
        optimizer="torch.optim.AdamW",
        precision="bf16",
        batch_size=8,
        n_trials=4,
        overrides=[*QUICK_WINDOW, "study.n_startup_trials=2", "study.confirm_top_k=1"],
    )
    assert tuned.study_name == "tonestream-specnet" and tuned.best_path.is_file()
    assert tuned.speedup is not None and tuned.config.decoder == "as_is"
    assert tuned.baseline.startswith(
        "a userdata_example.ToneStream object, collate_fn=userdata_example.pad_dict_collate as "
        "it is; DataLoader(dataset, batch_size=8); torch's"
    )
    kwargs = tuned.loader_kwargs()
    assert kwargs["batch_size"] == 8 and "shuffle" not in kwargs
