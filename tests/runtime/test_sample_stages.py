"""One sample's stages (``autotune.runtime.sample_stages``): the same pixels as the loader
gives, each piece charged to its stage; and a decoded copy profiled as the loader reads it."""

from __future__ import annotations

import pytest
import torch

from autotune.pipeline import decoders, preparation, recipes
from autotune.pipeline.sources import Source, synthetic
from autotune.runtime.sample_stages import StageClock, augment_pixels, decode_and_augment
from autotune.runtime.stages import profile_stages
from autotune.schema import RecipeConfig

EVAL = recipes.from_config(RecipeConfig(name="center_crop_eval", crop_size=64))


@pytest.fixture(scope="module")
def small_source() -> Source:
    return synthetic(count=24, num_classes=3)


@pytest.mark.parametrize("decoder", ["pil", "pil_reduced", "opencv"])
def test_instrumented_stages_give_what_the_recipe_gives(
    small_source: Source, decoder: str
) -> None:
    """The profile times the recipe's own pieces: same pixels as ``recipe(data, decoder)``."""
    recipe = recipes.from_config(RecipeConfig(crop_size=64, scale=[0.05, 0.2]))
    dec = decoders.get(decoder)
    for index in range(4):
        data = small_source.read(index)
        torch.manual_seed(index)
        expected = recipe(data, dec)
        torch.manual_seed(index)
        clock = StageClock()
        got, width, height = decode_and_augment(recipe, dec, data, clock)
        assert torch.equal(got, expected)
        assert (width, height) == decoders.probe(data)[:2]
        assert clock.wall["decode"] > 0 and clock.wall["augment"] > 0


def test_a_decoded_copy_is_profiled_as_the_loader_reads_it(small_source, tmp_path) -> None:
    """No decode: the pixels the recipe gets are the copy's, its output the loader's."""
    copy = preparation.ensure(small_source, EVAL, "decoded", tmp_path, processes=2)
    pixels = copy.data()
    clock = StageClock()
    got, width, height = augment_pixels(EVAL, pixels.read(0), clock)
    assert torch.equal(got, EVAL.from_pixels(pixels.read(0)))
    assert (height, width) == copy.sizes[0] and clock.wall["decode"] == 0
    profile = profile_stages(pixels, EVAL, "pil", n_samples=8, batch_size=4)
    assert profile.stages["decode"].cpu_s == 0 and profile.stages["augment"].cpu_s > 0
    h, w = copy.sizes[pixels.paths.index(profile.samples[0].path)]
    assert profile.samples[0].size_bytes == 3 * h * w  # the pixels read, not a file's bytes
    files = profile_stages(small_source, EVAL, "pil", n_samples=8, batch_size=4)
    assert files.stages["decode"].cpu_s > 0
