"""The timed step: the optimizer by name, autocast at the chosen precision, bad input in one
line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autotune.errors import UsageError
from autotune.runtime.workload import TinyCNN, TrainStep, build_optimizer
from autotune.schema import OptimizerConfig, StepConfig


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])


def test_the_optimizer_by_name_with_its_kwargs_and_model_lr() -> None:
    adamw = OptimizerConfig("torch.optim.AdamW", {"weight_decay": 0.05})
    step = TrainStep(TinyCNN(num_classes=4), torch.device("cpu"), lr=0.003, optimizer=adamw)
    assert isinstance(step.optimizer, torch.optim.AdamW)
    group = step.optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"]) == (0.003, 0.05)
    before = [p.detach().clone() for p in step.model.parameters()]
    step(_batch())
    assert any(not torch.equal(a, b) for a, b in zip(before, step.model.parameters(), strict=True))


def test_bf16_autocast_runs_the_forward_in_bf16_on_the_cpu() -> None:
    seen: list[torch.dtype] = []
    model = TinyCNN(num_classes=4)
    linear = next(m for m in model.modules() if isinstance(m, nn.Linear))
    linear.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    TrainStep(model, torch.device("cpu"), lr=0.01, precision="bf16")(_batch())
    TrainStep(TinyCNN(num_classes=4), torch.device("cpu"), lr=0.01)(_batch())
    assert seen == [torch.bfloat16]  # the fp32 step's model had no hook: one entry
    assert TrainStep(model, torch.device("cpu"), lr=0.01, precision="fp16").scaler is None


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        (OptimizerConfig("torch.optim.Nope"), "optimizer._target_=torch.optim.Nope cannot be"),
        (OptimizerConfig("torch.optim.SGD", {"momentum": -1}), "check optimizer.kwargs"),
    ],
)
def test_a_bad_optimizer_is_one_line(cfg: OptimizerConfig, expected: str) -> None:
    with pytest.raises(UsageError) as info:
        build_optimizer(cfg, TinyCNN().parameters(), lr=0.01)
    assert expected in str(info.value) and "\n" not in str(info.value)


def _dict_batch() -> dict[str, torch.Tensor]:
    from userdata_example import Spectrograms, pad_dict_collate

    clips = Spectrograms(count=4, vary=True)
    return pad_dict_collate([clips[i] for i in range(4)])


def test_the_user_s_loss_takes_the_model_and_the_whole_batch() -> None:
    from userdata_example import SpecNet

    step = TrainStep(
        SpecNet(), torch.device("cpu"), lr=0.01, loss=StepConfig("userdata_example.smoothed_loss")
    )
    before = [p.detach().clone() for p in step.model.parameters()]
    step.check(_dict_batch(), dataset="specs")
    assert any(not torch.equal(a, b) for a, b in zip(before, step.model.parameters(), strict=True))


@pytest.mark.parametrize(
    ("loss", "batch", "expected"),
    [
        (None, _dict_batch, "yields batches of dict(spec, lengths, label), and the default step"),
        ("userdata_example.smoothed_loss", _batch, "step._target_=userdata_example.smoothed_"),
        (None, lambda: (torch.zeros(2, 1, 64, 9), torch.tensor([0, 1])), "the default step fai"),
    ],
)
def test_a_step_that_cannot_take_the_batch_is_one_line(loss, batch, expected: str) -> None:
    from userdata_example import SpecNet

    step = TrainStep(SpecNet(), torch.device("cpu"), lr=0.01, loss=StepConfig(loss))
    with pytest.raises(UsageError) as info:
        step.check(batch(), dataset="specs")
    message = str(info.value)
    assert expected in message and "\n" not in message, message


def test_a_loss_that_cannot_be_imported_is_one_line() -> None:
    with pytest.raises(UsageError, match="step._target_=nowhere.loss cannot be imported"):
        TrainStep(TinyCNN(), torch.device("cpu"), lr=0.01, loss=StepConfig("nowhere.loss"))


def test_sgd_gets_momentum_only_when_named_without_kwargs() -> None:
    sgd = build_optimizer(OptimizerConfig(), TinyCNN().parameters(), lr=0.01)
    assert sgd.param_groups[0]["momentum"] == 0.9
    adamw = build_optimizer(OptimizerConfig("torch.optim.AdamW"), TinyCNN().parameters(), lr=0.01)
    assert isinstance(adamw, torch.optim.AdamW)  # no SGD momentum carried over to it


@pytest.mark.slow
def test_compile_compiles_the_model_in_place_for_every_kind_of_loss() -> None:
    from userdata_example import SpecNet

    step = TrainStep(
        SpecNet(),
        torch.device("cpu"),
        lr=0.01,
        loss=StepConfig("userdata_example.smoothed_loss"),
        compile=True,
    )
    assert step.model._compiled_call_impl is not None  # what nn.Module.compile() sets
    assert TrainStep(SpecNet(), torch.device("cpu"), lr=0.01).model._compiled_call_impl is None
