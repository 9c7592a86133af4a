"""The training process's share of the pipeline: the copy of each batch to the device and
what follows it there (decoding, augmenting, normalizing, as the settings say; the table in
``loader``'s docstring)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from autotune.pipeline import batches, decoders
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.recipes import Recipe

log = logging.getLogger(__name__)


class Normalize:
    """``(x - mean) / std`` for 0-255 values, with the recipe's 0-1 mean and std."""

    def __init__(self, recipe: Recipe, device: torch.device | str = "cpu") -> None:
        shape = (-1, 1, 1)
        self.mean = torch.tensor(recipe.mean, device=device).mul(255).view(shape)
        self.inv_std = torch.tensor(recipe.std, device=device).mul(255).reciprocal().view(shape)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return images.float().sub_(self.mean).mul_(self.inv_std)


class DeviceStage:
    """The training process's share: the copy to the device and what follows it there."""

    def __init__(
        self,
        recipe: Recipe,
        device: torch.device,
        config: PipelineConfig,
        *,
        seed: int | None = 0,
    ) -> None:
        self.device, self.config = device, config
        # as it is: the tutorial's loop copies with a plain .to(device)
        self.non_blocking = config.pin_memory and device.type == "cuda" and not config.as_is
        self.normalize = Normalize(recipe, device)
        self.augment = recipe.device_form(seed=seed) if config.augment_on == "gpu" else None
        self.device_decoder = decoders.DECODERS.get(config.decoder)
        if self.device_decoder is not None and not self.device_decoder.on_device:
            self.device_decoder = None

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device, non_blocking=self.non_blocking)

    def __call__(self, batch: Any) -> Any:
        """A host batch, on the device: as it is (every tensor in it copied), or the tuned
        pipeline's ``(images, labels)`` finished there."""
        if self.config.as_is:
            return batches.to_device(batch, self.device, non_blocking=self.non_blocking)
        images, labels = batch
        labels = self._to_device(labels)
        if self.augment is not None:
            # encoded bytes (1-D) stay on the host: the device decoder reads them from there
            moved = [i if i.dim() == 1 else self._to_device(i) for i in images]
            batch = self.augment(self._decode(moved))
        else:
            batch = self._to_device(images)
        if batch.dtype == torch.uint8 or self.augment is not None:
            batch = self.normalize(batch)  # float from the workers: normalized there already
        if self.config.channels_last:
            batch = batch.contiguous(memory_format=torch.channels_last)
        return batch, labels

    def _decode_one(self, encoded: torch.Tensor) -> torch.Tensor:
        assert self.device_decoder is not None
        try:
            return self.device_decoder.decode_batch([encoded], self.device)[0]
        except RuntimeError as exc:
            log.warning("the device decoder rejected an image (%s): decoded on the CPU", exc)
            cpu = decoders.get("pil").decode(encoded.numpy().tobytes())
            return self._to_device(cpu)

    def _decode(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """Decodes the encoded (1-D) images of a batch in one device call."""
        if self.device_decoder is None:
            return images
        encoded = [i for i, image in enumerate(images) if image.dim() == 1]
        if not encoded:
            return images
        data = [images[i] for i in encoded]
        try:
            decoded = self.device_decoder.decode_batch(data, self.device)
        except RuntimeError:
            # one image the device decoder rejects (damaged past its header, CMYK, 12-bit)
            # must not end the run: decode one by one, the rejected ones on the CPU
            decoded = [self._decode_one(image) for image in data]
        out = list(images)
        for i, image in zip(encoded, decoded, strict=True):
            out[i] = image
        return out
