"""autotune.session.knobs: one knob built from its config and checked, its condition, its
values and what it asks of Optuna."""

from __future__ import annotations

import dataclasses

import pytest
from optuna.trial import FixedTrial

from autotune import machine
from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.schema import KnobConfig
from autotune.session.knobs import Condition, Knob, build_knob

WORKERS = KnobConfig(type="int", low=0, high=4)


@pytest.fixture(scope="module")
def one_cpu() -> MachineFacts:
    return dataclasses.replace(machine.detect(want_cuda=False), usable_cpus=1)


@pytest.fixture(scope="module")
def workers(one_cpu: MachineFacts) -> Knob:
    return build_knob("num_workers", WORKERS, one_cpu, declared=[])


# --- conditions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("num_workers > 0", 0), ("pin_memory == false", False), ("decoder != pil", "pil")],
)
def test_condition_parses_numbers_booleans_and_names(text: str, value: object) -> None:
    condition = Condition.parse(text, "where")
    assert condition.value == value and type(condition.value) is type(value)
    assert str(Condition.parse(str(condition), "where")) == str(condition)


def test_condition_holds_on_the_values_given() -> None:
    condition = Condition.parse("num_workers >= 2", "where")
    assert condition.holds({"num_workers": 2}) and not condition.holds({"num_workers": 1})


# --- values and suggestions -------------------------------------------------------------------


def test_values_of_each_type() -> None:
    assert Knob("num_workers", "int", low=0, high=6, step=2).values() == [0, 2, 4, 6]
    assert Knob("pin_memory", "bool").values() == [False, True]
    assert Knob("decoder", "choice", choices=("pil", "opencv")).values() == ["pil", "opencv"]
    assert Knob("decoder", "fixed", value="pil").values() == ["pil"]


def test_a_fixed_knob_is_not_asked() -> None:
    trial = FixedTrial({"num_workers": 2})
    assert Knob("decoder", "fixed", value="pil").suggest(trial) == "pil"
    assert Knob("num_workers", "int", low=0, high=4).suggest(trial) == 2
    assert "decoder" not in trial.params


# --- building ---------------------------------------------------------------------------------


def test_cpus_is_the_usable_cpus(one_cpu: MachineFacts) -> None:
    cfg = KnobConfig(type="int", low=1, high="cpus")
    knob = build_knob("main_threads", cfg, dataclasses.replace(one_cpu, usable_cpus=6), [])
    assert (knob.low, knob.high) == (1, 6)


def test_a_condition_on_a_declared_knob(one_cpu: MachineFacts, workers: Knob) -> None:
    cfg = KnobConfig(type="int", low=1, high=4, when="num_workers > 0")
    knob = build_knob("prefetch_factor", cfg, one_cpu, declared=[workers])
    assert knob.when == Condition("num_workers", ">", 0)


@pytest.mark.parametrize("name", ["prefetch_factor", "main_threads"])
def test_fixed_none_means_torchs_default_where_torch_has_one(
    name: str, one_cpu: MachineFacts
) -> None:
    knob = build_knob(name, KnobConfig(type="fixed"), one_cpu, declared=[])
    assert (knob.type, knob.value) == ("fixed", None)


@pytest.mark.parametrize(
    ("name", "cfg", "message"),
    [
        pytest.param("nworkers", WORKERS, r"unknown knob 'nworkers'.*num_workers", id="unknown"),
        pytest.param(
            "num_workers",
            KnobConfig(type="int", low=5, high=2),
            r"num_workers.*low <= high.*low=5, high=2",
            id="low>high",
        ),
        pytest.param(
            "main_threads",
            KnobConfig(type="int", low=2, high="cpus"),
            r"main_threads.*low <= high.*low=2, high=1",
            id="low>cpus",
        ),
        pytest.param(
            "num_workers",
            KnobConfig(type="int", low=0, high=4, log=True),
            r"num_workers.*log.*low >= 1",
            id="log-low-0",
        ),
        pytest.param(
            "num_workers",
            KnobConfig(type="int", low=1, high=4, log=True, step=2),
            r"num_workers: a log range cannot have a step",
            id="log-with-step",
        ),
        pytest.param(
            "num_workers",
            KnobConfig(type="int", low=1, high=4, step=0),
            r"num_workers\.step must be >= 1",
            id="step-0",
        ),
        pytest.param(
            "num_workers",
            KnobConfig(type="int", low=0, high=2, choices=[0, 1, 4]),
            r"num_workers\.choices is set but its type is int: add "
            r"search_space\.knobs\.num_workers\.type=choice",
            id="choices-of-an-int",
        ),
        pytest.param(
            "decoder",
            KnobConfig(type="choice", choices=[]),
            r"decoder\.choices must list at least one",
            id="empty-choices",
        ),
        pytest.param(
            "decoder",
            KnobConfig(type="choice", choices=["pil", "jpegxl"]),
            r"unknown values \['jpegxl'\].*pil",
            id="unknown-decoder",
        ),
        pytest.param(
            "cache",
            KnobConfig(type="choice", choices=["none", "ram"]),
            r"cache\.choices has unknown values \['ram'\]; known: none, resized, decoded",
            id="unknown-cache",
        ),
        pytest.param(
            "decoder",
            KnobConfig(type="fixed", value="jpegxl"),
            r"decoder\.value 'jpegxl' is unknown; known: as_is, pil",
            id="fixed-unknown-decoder",
        ),
        pytest.param(
            "batch_size",
            KnobConfig(type="fixed"),
            r"batch_size\.value must be set",
            id="fixed-without-value",
        ),
        pytest.param(
            "prefetch_factor",
            KnobConfig(type="int", low=1, high=4, when="pin_memory == true"),
            r"prefetch_factor\.when refers to 'pin_memory'",
            id="when-undeclared",
        ),
        pytest.param(
            "prefetch_factor",
            KnobConfig(type="int", low=1, high=4, when="num_workers"),
            r"prefetch_factor\.when='num_workers' is not a condition.*num_workers > 0",
            id="when-malformed",
        ),
        pytest.param(
            "prefetch_factor",
            KnobConfig(type="int", low=1, high=4, when="num_workers > 1.2.3"),
            r"prefetch_factor\.when=.*'1\.2\.3' is not a number",
            id="when-not-a-number",
        ),
        pytest.param(
            "prefetch_factor",
            KnobConfig(type="int", low=1, high=4, when="num_workers > 0x"),
            r"prefetch_factor\.when=.*cannot be compared with the values of num_workers",
            id="when-not-comparable",
        ),
        pytest.param(
            "pin_memory",
            KnobConfig(type="bool", requires="tpu"),
            r"pin_memory\.requires must be one of.*cuda.*'tpu'",
            id="unknown-requires",
        ),
        pytest.param(
            "num_workers",
            KnobConfig(type="float", low=0, high=4),
            r"num_workers\.type must be one of int, choice, bool, fixed",
            id="unknown-type",
        ),
        pytest.param(
            "num_workers",
            KnobConfig(type="int", low=0, high="all"),
            r"num_workers\.high must be an integer or 'cpus'",
            id="bad-bound",
        ),
    ],
)
def test_invalid_knob_is_a_usage_error(
    name: str, cfg: KnobConfig, message: str, one_cpu: MachineFacts, workers: Knob
) -> None:
    with pytest.raises(UsageError, match=message):
        build_knob(name, cfg, one_cpu, declared=[workers])
