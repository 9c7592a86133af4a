"""autotune.session.space: the composed spaces, their conditions, bounds and validation."""

from __future__ import annotations

import dataclasses

import optuna
import pytest
import torch
from helpers import ask, config_of
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import FixedTrial

from autotune import machine
from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline import decoders
from autotune.pipeline.config import PipelineConfig
from autotune.schema import KnobConfig, SearchSpaceConfig
from autotune.session.space import SearchSpace


@pytest.fixture(scope="module")
def real_facts() -> MachineFacts:
    return machine.detect(want_cuda=False)


def facts_with(real: MachineFacts, cpus: int) -> MachineFacts:
    return dataclasses.replace(real, usable_cpus=cpus)


@pytest.fixture(scope="module")
def facts4(real_facts: MachineFacts) -> MachineFacts:
    return facts_with(real_facts, 4)


def space_cfg(*overrides: str) -> SearchSpaceConfig:
    return config_of(list(overrides)).search_space


@pytest.fixture(scope="module")
def default_cfg() -> SearchSpaceConfig:
    return space_cfg()


@pytest.fixture(scope="module")
def quick_cfg() -> SearchSpaceConfig:
    return space_cfg("search_space=quick")


def build(
    cfg: SearchSpaceConfig, facts: MachineFacts, device: str = "cpu", batch_size: int = 32
) -> SearchSpace:
    return SearchSpace.from_config(cfg, facts, device=device, batch_size=batch_size)


def names(space: SearchSpace) -> list[str]:
    return [k.name for k in space.knobs]


# --- conditions -------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["default", "quick"])
def test_zero_workers_never_suggests_worker_only_knobs(
    which: str, default_cfg: SearchSpaceConfig, quick_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    space = build(default_cfg if which == "default" else quick_cfg, facts4)
    # FixedTrial raises for any parameter it was not given: these must be all it needs.
    trial = FixedTrial({"num_workers": 0, "decoder": "pil", "cache": "none", "main_threads": 1})
    cfg = space.suggest(trial)
    assert cfg.num_workers == 0
    assert cfg.prefetch_factor is None
    assert cfg.persistent_workers is False
    assert "prefetch_factor" not in trial.params
    assert "persistent_workers" not in trial.params


def test_workers_bring_their_knobs(default_cfg: SearchSpaceConfig, facts4: MachineFacts) -> None:
    space = build(default_cfg, facts4)
    params = {
        "num_workers": 2,
        "prefetch_factor": 4,
        "persistent_workers": True,
        "in_order": False,
        "decoder": "opencv",
        "cache": "none",
        "main_threads": 3,
    }
    trial = FixedTrial(params)
    cfg = space.suggest(trial)
    assert (cfg.num_workers, cfg.prefetch_factor, cfg.persistent_workers) == (2, 4, True)
    assert cfg.in_order is False and cfg.loader_kwargs()["in_order"] is False
    assert (cfg.decoder, cfg.main_threads, cfg.batch_size) == ("opencv", 3, 32)
    assert trial.params == params


def test_workers_without_prefetch_factor_param_fails(
    default_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    space = build(default_cfg, facts4)
    trial = FixedTrial({"num_workers": 2, "decoder": "pil", "main_threads": 1})
    with pytest.raises(ValueError, match="prefetch_factor"):
        space.suggest(trial)


def test_quick_space_fixed_knob_under_condition(
    quick_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    space = build(quick_cfg, facts4)
    trial = FixedTrial(
        {"num_workers": 1, "prefetch_factor": 2, "decoder": "pil", "main_threads": 1}
    )
    cfg = space.suggest(trial)
    assert (cfg.prefetch_factor, cfg.persistent_workers) == (2, True)


# --- requires: cuda ---------------------------------------------------------------------------


def test_pin_memory_left_out_on_cpu(default_cfg: SearchSpaceConfig, facts4: MachineFacts) -> None:
    space = build(default_cfg, facts4, device="cpu")
    assert "pin_memory" not in names(space)
    assert any("pin_memory" in note and "CUDA" in note for note in space.notes)
    assert "pin_memory" not in ask(space).distributions


CUDA_KNOBS = (
    "pin_memory",
    "augment_on",
    "transfer",
    "device_prefetch",
    "channels_last",
    "dali_num_threads",
    "dali_prefetch_queue_depth",
)


def test_default_space_on_cpu(default_cfg: SearchSpaceConfig, facts4: MachineFacts) -> None:
    space = build(default_cfg, facts4, device="cpu")
    knobs = {k.name: k for k in space.knobs}
    assert knobs["decoder"].choices == ("as_is", "pil", "pil_reduced", "opencv", "torchvision")
    # one line per reason, not one per choice
    assert "decoders nvjpeg, dali left out: it needs a CUDA device" in space.notes
    assert f"{', '.join(CUDA_KNOBS)} left out: they need a CUDA device" in space.notes
    assert len(space.notes) == 2
    for name in CUDA_KNOBS:
        assert name not in knobs
    params = {"num_workers": 0, "decoder": "opencv", "cache": "none", "main_threads": 1}
    cfg = space.suggest(FixedTrial(params))
    assert (cfg.augment_on, cfg.transfer, cfg.device_prefetch, cfg.channels_last) == (
        "cpu",
        "uint8",
        False,
        False,
    )


def test_cuda_knobs_searched_on_cuda(default_cfg: SearchSpaceConfig, facts4: MachineFacts) -> None:
    space = build(default_cfg, facts4, device="cuda")  # the space only reads the device name
    assert set(CUDA_KNOBS) <= set(names(space))
    assert not any(name in note for note in space.notes for name in CUDA_KNOBS)
    assert ask(space).distributions["pin_memory"] == CategoricalDistribution([False, True])
    decoder = next(k for k in space.knobs if k.name == "decoder")
    # nvjpeg also needs a CUDA runtime in this process, which this test machine may lack
    assert ("nvjpeg" in decoder.choices) == torch.cuda.is_available()
    dali = decoders.DaliDecoder.unavailable_reason() is None
    assert ("dali" in decoder.choices) == dali
    base = {"num_workers": 0, "pin_memory": True, "decoder": "pil", "cache": "none"}
    base["main_threads"] = 1
    extra = {"device_prefetch": True, "channels_last": False}
    cfg = space.suggest(FixedTrial({**base, **extra, "augment_on": "cpu", "transfer": "float"}))
    assert (cfg.pin_memory, cfg.transfer, cfg.device_prefetch) == (True, "float", True)
    # transfer is only asked when the workers augment: the device needs the uint8 images
    cfg = space.suggest(FixedTrial({**base, **extra, "augment_on": "gpu"}))
    assert (cfg.augment_on, cfg.transfer) == ("gpu", "uint8")


def test_nvjpeg_implies_augmenting_on_the_device() -> None:
    cfg = PipelineConfig(decoder="nvjpeg", augment_on="cpu", transfer="float")
    assert (cfg.augment_on, cfg.transfer) == ("gpu", "uint8")


def test_dali_knobs_only_with_dali(default_cfg: SearchSpaceConfig, facts4: MachineFacts) -> None:
    space = build(default_cfg, facts4, device="cuda")
    asked = ask(space, {"decoder": "pil"}).distributions
    assert "dali_num_threads" not in asked and "dali_prefetch_queue_depth" not in asked
    loader = {"num_workers": 2, "prefetch_factor": 3, "persistent_workers": True}
    cfg = PipelineConfig(**loader, pin_memory=True, decoder="dali", dali_prefetch_queue_depth=4)
    # DALI replaces the DataLoader: the loader's settings are dropped, so configs dedupe
    assert (cfg.num_workers, cfg.prefetch_factor, cfg.pin_memory) == (0, None, False)
    assert (cfg.dali_num_threads, cfg.dali_prefetch_queue_depth) == (2, 4)  # 2: DALI's default
    assert cfg.buffered_batches == 4
    assert cfg.short() == "dali th2 q4 t-default bs32"
    cfg = PipelineConfig(**loader, decoder="pil", dali_num_threads=3)
    assert (cfg.dali_num_threads, cfg.dali_prefetch_queue_depth) == (None, None)


# --- bounds from the machine ------------------------------------------------------------------


@pytest.mark.parametrize("cpus", [4, 1])
def test_cpus_resolves_to_usable_cpus(
    cpus: int, default_cfg: SearchSpaceConfig, real_facts: MachineFacts
) -> None:
    space = build(default_cfg, facts_with(real_facts, cpus))
    knobs = {k.name: k for k in space.knobs}
    assert (knobs["num_workers"].low, knobs["num_workers"].high) == (0, cpus)
    assert (knobs["main_threads"].low, knobs["main_threads"].high) == (1, cpus)
    dists = ask(space).distributions
    assert dists["num_workers"] == IntDistribution(0, cpus)
    assert dists["main_threads"] == IntDistribution(1, cpus)


def test_every_asked_trial_stays_in_bounds(
    default_cfg: SearchSpaceConfig, real_facts: MachineFacts
) -> None:
    space = build(default_cfg, facts_with(real_facts, 3))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        cfg = space.suggest(study.ask())
        assert 0 <= cfg.num_workers <= 3
        assert cfg.main_threads is not None and 1 <= cfg.main_threads <= 3
        assert (cfg.prefetch_factor is None) == (cfg.num_workers == 0)


def test_decoder_choices_are_a_categorical(
    default_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    space = build(default_cfg, facts4)
    decoder = next(k for k in space.knobs if k.name == "decoder")
    assert ask(space).distributions["decoder"] == CategoricalDistribution(list(decoder.choices))
    assert "pil" in decoder.choices


# --- batch_size -------------------------------------------------------------------------------


def test_batch_size_fixed_from_the_root_value(facts4: MachineFacts) -> None:
    space = build(space_cfg("batch_size=8"), facts4, batch_size=8)
    trial = FixedTrial({"num_workers": 0, "decoder": "pil", "cache": "none", "main_threads": 1})
    assert space.suggest(trial).batch_size == 8
    assert "batch_size" not in trial.params  # fixed: not a parameter of the study


def test_batch_size_defaults_when_the_space_omits_it(facts4: MachineFacts) -> None:
    cfg = SearchSpaceConfig(knobs={"num_workers": KnobConfig(type="int", low=0, high=2)})
    space = build(cfg, facts4, batch_size=16)
    assert space.suggest(FixedTrial({"num_workers": 0})).batch_size == 16


def test_a_list_of_workers_without_pytorch_s_default_is_refused_for_its_baseline(
    facts4: MachineFacts,
) -> None:
    cfg = space_cfg(
        "search_space=quick",
        "search_space.knobs.num_workers.type=choice",
        "search_space.knobs.num_workers.choices=[1,4]",
    )
    with pytest.raises(
        UsageError, match=r"num_workers\.choices must include 0, the baseline's \(PyTorch's\)$"
    ):
        build(cfg, facts4).baseline_params(default_threads=1)


def test_a_list_of_threads_gives_the_baseline_the_closest_to_torch_s_own(
    facts4: MachineFacts,
) -> None:
    cfg = space_cfg(
        "search_space=quick",
        "search_space.knobs.main_threads.type=choice",
        "search_space.knobs.main_threads.choices=[1,4]",
    )
    assert build(cfg, facts4).baseline_params(default_threads=3)["main_threads"] == 4


def test_batch_size_choice_list(facts4: MachineFacts) -> None:
    cfg = space_cfg(
        "search_space=quick",
        "search_space.knobs.batch_size.type=choice",
        "search_space.knobs.batch_size.choices=[16,32,64]",
    )
    space = build(cfg, facts4)
    params = {"num_workers": 0, "decoder": "pil", "main_threads": 1, "batch_size": 64}
    assert space.suggest(FixedTrial(params)).batch_size == 64
    assert ask(space).distributions["batch_size"] == CategoricalDistribution([16, 32, 64])
    assert space.baseline_params(default_threads=1)["batch_size"] == 32


# --- baseline ---------------------------------------------------------------------------------


def test_baseline_is_pytorchs_defaults(
    default_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    params = build(default_cfg, facts4).baseline_params(default_threads=2)
    assert params == {"num_workers": 0, "decoder": "as_is", "main_threads": 2}


def test_baseline_on_cuda_does_not_pin(
    default_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    space = build(default_cfg, facts4, device="cuda")
    params = space.baseline_params(default_threads=2)
    assert params["pin_memory"] is False
    # the tutorial pipeline: its normalized float32 crosses the bus, no side stream, NCHW;
    # none of these is a trial parameter of the as-is pipeline
    assert not {"augment_on", "transfer", "device_prefetch", "channels_last"} & set(params)
    config = space.suggest(FixedTrial(params))
    assert config.as_is and (config.augment_on, config.transfer) == ("cpu", "float")
    assert (config.device_prefetch, config.channels_last, config.drop_last) == (False,) * 3


@pytest.mark.parametrize(("threads", "expected"), [(16, 4), (0, 1), (3, 3)])
def test_baseline_threads_clamped_into_range(
    threads: int, expected: int, default_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    params = build(default_cfg, facts4).baseline_params(default_threads=threads)
    assert params["main_threads"] == expected


def test_baseline_quick_space(quick_cfg: SearchSpaceConfig, facts4: MachineFacts) -> None:
    space = build(quick_cfg, facts4)
    params = space.baseline_params(default_threads=8)
    assert params == {"num_workers": 0, "decoder": "as_is", "main_threads": 1}
    cfg = space.suggest(FixedTrial(params))  # a baseline is a complete, valid trial
    assert (cfg.num_workers, cfg.decoder, cfg.main_threads) == (0, "as_is", 1)


# --- fingerprint ------------------------------------------------------------------------------


def test_fingerprint_stable(default_cfg: SearchSpaceConfig, facts4: MachineFacts) -> None:
    first = build(default_cfg, facts4).fingerprint()
    assert first == build(space_cfg(), facts4).fingerprint()
    assert len(first) == 16


def test_fingerprint_changes_with_a_bound(
    default_cfg: SearchSpaceConfig, facts4: MachineFacts, real_facts: MachineFacts
) -> None:
    base = build(default_cfg, facts4).fingerprint()
    assert build(default_cfg, facts_with(real_facts, 5)).fingerprint() != base
    narrower = space_cfg("search_space.knobs.prefetch_factor.high=4")
    assert build(narrower, facts4).fingerprint() != base


def test_fingerprint_differs_between_spaces(
    default_cfg: SearchSpaceConfig, quick_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    assert build(default_cfg, facts4).fingerprint() != build(quick_cfg, facts4).fingerprint()


# --- invalid spaces (a knob's own checks: test_knobs.py) --------------------------------------

WORKERS = KnobConfig(type="int", low=0, high=4)


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        # a knob's own error reaches the user through the space
        pytest.param({"nworkers": WORKERS}, r"unknown knob 'nworkers'.*num_workers", id="unknown"),
        pytest.param(
            {
                "num_workers": WORKERS,
                "prefetch_factor": KnobConfig(type="int", low=1, high=4),
            },
            r'prefetch_factor needs num_workers > 0.*when: "num_workers > 0"',
            id="prefetch-without-when",
        ),
        pytest.param(
            {
                "num_workers": WORKERS,
                "persistent_workers": KnobConfig(type="bool", when="num_workers >= 0"),
            },
            r"persistent_workers needs num_workers > 0",
            id="persistent-when-holds-at-0",
        ),
    ],
)
def test_invalid_space_is_a_usage_error(
    knobs: dict[str, KnobConfig], message: str, real_facts: MachineFacts
) -> None:
    with pytest.raises(UsageError, match=message):
        build(SearchSpaceConfig(name="bad", knobs=knobs), facts_with(real_facts, 1))


def test_prefetch_factor_without_when_is_fine_when_workers_cannot_be_zero(
    facts4: MachineFacts,
) -> None:
    cfg = SearchSpaceConfig(
        knobs={
            "num_workers": KnobConfig(type="int", low=1, high=4),
            "prefetch_factor": KnobConfig(type="int", low=1, high=4),
        }
    )
    space = build(cfg, facts4)
    assert space.suggest(FixedTrial({"num_workers": 1, "prefetch_factor": 3})).prefetch_factor == 3


def test_a_fixed_decoder_is_tried_beside_the_pipeline_as_it_is(facts4: MachineFacts) -> None:
    cfg = SearchSpaceConfig(knobs={"decoder": KnobConfig(type="fixed", value="pil")})
    space = build(cfg, facts4)
    assert space.suggest(FixedTrial({"decoder": "pil"})).decoder == "pil"
    assert space.suggest(FixedTrial({"decoder": "as_is"})).as_is
    assert "decoder as_is added: the baseline is your pipeline as it is" in space.notes


def test_a_space_without_decoders_tunes_the_pipeline_as_it_is(facts4: MachineFacts) -> None:
    cfg = SearchSpaceConfig(knobs={"num_workers": KnobConfig(type="int", low=0, high=2)})
    assert build(cfg, facts4).suggest(FixedTrial({"num_workers": 1})).as_is


def test_the_pipeline_as_it_is_keeps_its_own_choices(
    default_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    """As it is, only the loader's settings and threads vary: the tuner's pipeline choices
    are not trial parameters, not grid points and not polish neighbours."""
    # every knob of the default space, each worker and thread count at one or two values: the
    # grid stays small enough to walk, and every pipeline choice stays in it
    narrow = {
        "num_workers": KnobConfig(type="int", low=0, high=1),
        "prefetch_factor": KnobConfig(type="int", low=2, high=2, when="num_workers > 0"),
        "main_threads": KnobConfig(type="int", low=1, high=1),
    }
    cfg = dataclasses.replace(default_cfg, knobs={**default_cfg.knobs, **narrow})
    space = build(cfg, facts4, device="cuda")
    kept = {"augment_on", "transfer", "device_prefetch", "channels_last"}
    grid = space.grid()
    as_is_points = [p for p in grid if p["decoder"] == "as_is"]
    assert as_is_points and not any(kept & set(p) for p in as_is_points)
    assert any(kept <= set(p) for p in grid if p["decoder"] == "pil")
    params = {
        **space.baseline_params(default_threads=2),
        "num_workers": 1,
        "prefetch_factor": 2,
        "persistent_workers": False,
    }
    for points in space.neighbours(params).values():
        for point in points:
            assert point["decoder"] != "as_is" or not kept & set(point)


def test_a_fixed_decoder_that_cannot_run_here_is_refused(facts4: MachineFacts) -> None:
    cfg = SearchSpaceConfig(knobs={"decoder": KnobConfig(type="fixed", value="nvjpeg")})
    with pytest.raises(UsageError, match="no decoder of the list can run here"):
        build(cfg, facts4, device="cpu")


def test_when_on_a_knob_left_out_by_requires_uses_its_inactive_value(
    facts4: MachineFacts,
) -> None:
    cfg = SearchSpaceConfig(
        knobs={
            "pin_memory": KnobConfig(type="bool", requires="cuda"),
            "main_threads": KnobConfig(type="int", low=1, high=2, when="pin_memory == false"),
        }
    )
    space = build(cfg, facts4, device="cpu")
    assert space.suggest(FixedTrial({"main_threads": 2})).main_threads == 2


def test_neighbours_change_one_knob_and_respect_conditions() -> None:
    facts = dataclasses.replace(machine.detect(want_cuda=False), usable_cpus=4)
    cfg = config_of([])
    space = SearchSpace.from_config(cfg.search_space, facts, device="cpu", batch_size=32)
    best = {
        "num_workers": 1,
        "prefetch_factor": 2,
        "persistent_workers": True,
        "in_order": True,
        "decoder": "torchvision",
        "cache": "none",
        "main_threads": 1,
    }
    per_knob = space.neighbours(best)
    firsts = [next(k for k in best if points[0].get(k) != best[k]) for points in per_knob.values()]
    assert firsts == list(best) == list(per_knob)  # one list per knob, in declaration order
    assert per_knob["num_workers"][0] == {**best, "num_workers": 2}  # one more worker first
    points = [p for knob_points in per_knob.values() for p in knob_points]
    for point in points:
        changed = {k for k in best if point.get(k) != best[k]}
        # no workers: no worker-only knobs; as it is: no cache of the tuner's
        assert len(changed) == 1 or point["num_workers"] == 0 or point["decoder"] == "as_is"
        space.suggest(optuna.trial.FixedTrial(point))  # every neighbour is a valid point
    no_workers = next(p for p in points if p["num_workers"] == 0)
    assert "prefetch_factor" not in no_workers and "persistent_workers" not in no_workers
    assert {"decoder": "pil"}.items() <= next(p for p in points if p["decoder"] == "pil").items()
    # back from no workers: the worker-only knobs from the fill, where it has them
    none = {**no_workers, "decoder": "torchvision"}
    fill = {"persistent_workers": False, "prefetch_factor": 6, "in_order": True}
    assert space.neighbours(none, fill)["num_workers"][0] == {**best, **fill}
    assert "prefetch_factor" not in space.neighbours(none)["num_workers"][0]


def test_the_decoder_comes_before_the_choices_it_decides(facts4: MachineFacts) -> None:
    cfg = SearchSpaceConfig(
        knobs={
            "augment_on": KnobConfig(type="choice", choices=["cpu", "gpu"]),
            "decoder": KnobConfig(type="choice", choices=["as_is", "pil"]),
        }
    )
    with pytest.raises(UsageError, match="declare decoder before augment_on"):
        build(cfg, facts4, device="cuda")


def test_worker_counts_listed_as_choices_are_polished_nearest_first(facts4: MachineFacts) -> None:
    cfg = SearchSpaceConfig(
        knobs={
            "num_workers": KnobConfig(type="choice", choices=[0, 1, 2, 4, 8, 16, 32]),
            "decoder": KnobConfig(type="choice", choices=["pil", "opencv"]),
        }
    )
    space = build(cfg, facts4)
    workers, decoders_ = space.neighbours({"num_workers": 4, "decoder": "pil"}).values()
    assert [p["num_workers"] for p in workers] == [8, 2, 16, 1, 32, 0]  # 8 before 0
    assert [p["decoder"] for p in decoders_] == ["as_is", "opencv"]  # names: as listed


def test_a_config_turns_back_into_the_params_of_its_point(
    default_cfg: SearchSpaceConfig, facts4: MachineFacts
) -> None:
    """The worth table's variants are configs; queued as trials they are params again."""
    space = build(default_cfg, facts4, device="cpu")
    grid = space.grid()
    for point in grid[::7]:
        config = space.suggest(FixedTrial(point))
        params = space.params_of(config)
        assert params is not None and space.suggest(FixedTrial(params)) == config
    config = space.suggest(FixedTrial(grid[0]))
    assert space.params_of(dataclasses.replace(config, num_workers=99)) is None  # not a point
