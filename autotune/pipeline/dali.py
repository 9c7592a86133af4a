"""``decoder=dali``: NVIDIA DALI runs the whole pipeline in place of the DataLoader.

DALI decodes with nvJPEG (its ``mixed`` backend: Huffman on the CPU, the rest on the GPU) and
augments on the GPU, with its own thread pool (``dali_num_threads``) and queue of ready
batches (``dali_prefetch_queue_depth``). The bytes are read on the Python thread that feeds
DALI's external source, in the order of the same sampler the DataLoader would use. Each
recipe adds its own operators (``Recipe.dali_ops``); the centre crop, mirror and
normalization that follow are common to all.

Without a GPU (``device=cpu``) the same graph runs on DALI's CPU backend: that is how it is
tested here; on a CUDA machine only the backends change.

Install with ``pip install "autotune[dali]"`` (DALI's wheel for CUDA 13; for CUDA 12 install
``nvidia-dali-cuda120`` instead).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import RandomSampler, Sampler

from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source


class _Batches:
    """DALI's external source: batches of (encoded bytes, label), one epoch per ``iter``."""

    def __init__(
        self,
        source: Source,
        sampler: Sampler[int] | Sequence[int],
        batch_size: int,
        drop_last: bool,
    ) -> None:
        self.source, self.sampler = source, sampler
        self.batch_size, self.drop_last = batch_size, drop_last
        self._indices: Iterator[int] = iter(())

    def __iter__(self) -> _Batches:
        self._indices = iter(self.sampler)
        return self

    def __next__(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        indices = [i for _, i in zip(range(self.batch_size), self._indices, strict=False)]
        if not indices or (self.drop_last and len(indices) < self.batch_size):
            raise StopIteration
        data = [np.frombuffer(self.source.read(i), dtype=np.uint8) for i in indices]
        labels = [np.array(self.source.labels[i], dtype=np.int64) for i in indices]
        return data, labels


class DaliLoader:
    """Yields ``(images, labels)`` on the device, normalized: what ``TunedLoader`` yields."""

    def __init__(
        self,
        source: Source,
        config: PipelineConfig,
        *,
        recipe: Recipe,
        device: torch.device,
        seed: int | None,
        sampler: Sampler[int] | Sequence[int] | None,
    ) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        if sampler is None:
            generator = torch.Generator().manual_seed(seed) if seed is not None else None
            sampler = RandomSampler(range(len(source)), generator=generator)
        self.config, self.device = config, device
        self.prefetches = True  # DALI keeps dali_prefetch_queue_depth batches ready
        self._length = len(sampler) // config.batch_size  # type: ignore[arg-type]
        if not config.drop_last:
            self._length = -(-len(sampler) // config.batch_size)  # type: ignore[arg-type]
        feed = _Batches(source, sampler, config.batch_size, config.drop_last)
        pipe = _pipeline(feed, config, recipe, device, seed)
        policy = LastBatchPolicy.DROP if config.drop_last else LastBatchPolicy.PARTIAL
        self._iterator = DALIGenericIterator(
            [pipe], ["images", "labels"], auto_reset=True, last_batch_policy=policy
        )

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for (batch,) in self._iterator:
            images = batch["images"]
            if self.config.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            yield images, batch["labels"].view(-1).to(self.device)

    def __len__(self) -> int:
        return self._length


def _pipeline(
    feed: _Batches, config: PipelineConfig, recipe: Recipe, device: torch.device, seed: int | None
):  # noqa: ANN202 - a DALI Pipeline
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def

    on_gpu = device.type == "cuda"
    decode_on, ops_on = ("mixed", "gpu") if on_gpu else ("cpu", "cpu")

    @pipeline_def(
        batch_size=config.batch_size,
        num_threads=config.dali_num_threads,
        prefetch_queue_depth=config.dali_prefetch_queue_depth,
        device_id=(device.index or 0) if on_gpu else None,
        seed=-1 if seed is None else seed,
    )
    def graph():  # noqa: ANN202
        # cycle="raise": StopIteration ends an epoch, the next epoch calls iter(feed) again
        jpegs, labels = fn.external_source(source=feed, num_outputs=2, batch=True, cycle="raise")
        images, mirror = recipe.dali_ops(fn, types, jpegs, decode_on=decode_on, ops_on=ops_on)
        images = fn.crop_mirror_normalize(
            images,
            device=ops_on,
            dtype=types.FLOAT,
            output_layout="CHW",
            crop=[recipe.crop_size, recipe.crop_size],  # centred (no-op if resized to the crop)
            mean=[m * 255 for m in recipe.mean],
            std=[s * 255 for s in recipe.std],
            mirror=mirror,
        )
        return images, labels

    return graph()
