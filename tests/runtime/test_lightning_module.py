"""A LightningModule as the model and a LightningDataModule as the dataset: their own step,
optimizer, Dataset, collate and batch size, as a Lightning Trainer would run them."""

from __future__ import annotations

import pytest
import torch

from autotune.errors import UsageError
from autotune.pipeline.user_data import UserData
from autotune.runtime.lightning_module import optimizer_of
from autotune.runtime.workload import TrainStep

# Lightning's import alone is seconds of each test process
pytestmark = pytest.mark.slow


def _tone_module() -> torch.nn.Module:
    """lightning_example's LightningModule, Lightning imported where a test runs, not where
    the tests are collected (every pytest-xdist process collects them all)."""
    from lightning_example import ToneModule

    return ToneModule()


def test_the_datamodule_s_train_dataloader_is_what_is_read(tmp_path) -> None:
    marks = tmp_path / "marks"
    data, batch = UserData.inspect("lightning_example.ToneData", {"marks": str(marks)})
    assert (len(data), data.batch_size) == (48, 16)
    assert set(batch) == {"spec", "lengths", "label"}  # its loader's own collate
    dataset, collate = data.open()  # as a trial opens it: set up again, not prepared again
    assert len(dataset) == 48 and collate.__name__ == "pad_dict_collate"
    assert [p.name for p in marks.iterdir()] == ["prepared-0"]


def test_the_lightning_module_s_step_and_optimizer_are_the_step_s() -> None:
    data, batch = UserData.inspect("lightning_example.ToneData", {})
    step = TrainStep(_tone_module(), torch.device("cpu"), lr=0.5, precision="bf16")
    assert isinstance(step.optimizer, torch.optim.AdamW)  # from configure_optimizers
    assert step.optimizer.param_groups[0]["lr"] == 3e-3  # its own, not model.lr
    before = [p.detach().clone() for p in step.model.parameters()]
    step.check(batch, dataset="tones")  # a dict batch: no loss needs naming
    step(batch)
    assert step.steps == 2  # the batch index training_step was given counts up
    assert any(not torch.equal(a, b) for a, b in zip(before, step.model.parameters(), strict=True))


@pytest.mark.parametrize(
    ("returned", "count"),
    [
        (lambda opt: opt, 1),
        (lambda opt: [opt], 1),
        (lambda opt: ([opt], [torch.optim.lr_scheduler.StepLR(opt, 1)]), 1),
        (lambda opt: [{"optimizer": opt}], 1),
        (lambda opt: (opt, torch.optim.SGD(_tone_module().parameters(), lr=1)), 2),
    ],
)
def test_every_form_of_configure_optimizers(returned, count: int) -> None:
    model = _tone_module()
    optimizer = torch.optim.AdamW(model.parameters())
    model.configure_optimizers = lambda: returned(optimizer)
    if count == 1:
        assert optimizer_of(model) is optimizer
    else:
        with pytest.raises(UsageError, match="returned 2 optimizers: the timed step runs"):
            optimizer_of(model)
