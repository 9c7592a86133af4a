"""JPEG decoders: one small class each behind one interface, a name->class map at the bottom.

Every decoder returns the image as a ``uint8`` tensor ``(3, H, W)`` in RGB; EXIF orientation
is applied by ``orient`` unless the decoder does it itself (``applies_orientation``), so all
decoders give the same pixels within JPEG-decoder tolerance and the tuner compares like with
like.
"""

from __future__ import annotations

import io
import warnings
from abc import ABC, abstractmethod
from typing import ClassVar

import cv2
import numpy as np
import torch
from PIL import Image
from torchvision.io import ImageReadMode
from torchvision.io import decode_jpeg as torchvision_decode_jpeg

try:
    from torchcodec.decoders import decode_jpeg as torchcodec_decode_jpeg
except ImportError:  # TorchCodec absent (torch before 2.14): torchvision.io's CPU and nvJPEG
    torchcodec_decode_jpeg = None
# torchvision.io's decoders are deprecated in torchvision 0.29: silenced once here, not per image
warnings.filterwarnings("ignore", category=DeprecationWarning, module="torchvision")

_EXIF_ORIENTATION = 0x0112


def probe(data: bytes) -> tuple[int, int, int]:
    """Width, height (as displayed, i.e. after EXIF orientation) and the EXIF orientation.

    Reads the header only: cheap enough to run before every decode.
    """
    with Image.open(io.BytesIO(data)) as img:
        width, height = img.size
        orientation = img.getexif().get(_EXIF_ORIENTATION, 1) if img.format == "JPEG" else 1
    if orientation in (5, 6, 7, 8):  # rotated by 90 degrees: displayed sides swap
        width, height = height, width
    return width, height, orientation


def orient(image: torch.Tensor, orientation: int) -> torch.Tensor:
    """Applies an EXIF orientation (1-8) to a ``(C, H, W)`` tensor."""
    if orientation in (2, 3, 5, 7):
        image = image.flip(-1)
    if orientation in (3, 4):
        image = image.flip(-2)
    elif orientation in (6, 7):
        image = image.rot90(-1, (-2, -1))
    elif orientation in (5, 8):
        image = image.rot90(1, (-2, -1))
    return image


class Decoder(ABC):
    """Turns encoded bytes into a ``uint8`` RGB tensor ``(3, H, W)``."""

    name: ClassVar[str]
    # Decodes at 1/2, 1/4 or 1/8 of the size for less work (JPEG DCT scaling).
    can_reduce: ClassVar[bool] = False
    # decode() already returns the image as displayed (EXIF orientation applied)
    applies_orientation: bool = False
    # decodes whole batches on the device in the training process (decode_batch); workers
    # only read bytes, and use decode() for the few files the device decoder must not get
    on_device: ClassVar[bool] = False
    # a whole pipeline of its own (DALI) in place of the DataLoader: see pipeline/dali.py
    replaces_loader: ClassVar[bool] = False

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this decoder cannot run here (missing library or device), or None."""
        return None

    @abstractmethod
    def decode(self, data: bytes, *, reduce: int = 1) -> torch.Tensor:
        """Decodes ``data``; ``reduce`` > 1 is a hint for decoders with ``can_reduce``."""


def _hwc_to_chw(array: np.ndarray) -> torch.Tensor:
    # Pillow's arrays are read-only views; nothing writes to a decoded image in place (every
    # op after it allocates), so no copy is made and torch's warning about it is silenced.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array).permute(2, 0, 1)


class PilDecoder(Decoder):
    """Pillow (libjpeg-turbo), what ``torchvision.datasets.ImageFolder`` uses."""

    name = "pil"

    def decode(self, data: bytes, *, reduce: int = 1) -> torch.Tensor:
        with Image.open(io.BytesIO(data)) as img:
            return _hwc_to_chw(np.asarray(img.convert("RGB")))


class PilReducedDecoder(Decoder):
    """Pillow with JPEG draft mode: libjpeg scales the DCT, skipping most of the decode work."""

    name = "pil_reduced"
    can_reduce = True

    def decode(self, data: bytes, *, reduce: int = 1) -> torch.Tensor:
        with Image.open(io.BytesIO(data)) as img:
            if reduce > 1 and img.format == "JPEG":
                width, height = img.size
                # draft picks the largest DCT scale s with size // s >= the requested size
                img.draft("RGB", (width // reduce, height // reduce))
            return _hwc_to_chw(np.asarray(img.convert("RGB")))


class OpenCvDecoder(Decoder):
    """``cv2.imdecode`` (OpenCV's libjpeg-turbo), BGR converted to RGB."""

    name = "opencv"

    def decode(self, data: bytes, *, reduce: int = 1) -> torch.Tensor:
        flags = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION  # orientation applied by orient
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
        if bgr is None:
            raise ValueError("OpenCV could not decode the image")
        return _hwc_to_chw(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


class TorchvisionDecoder(Decoder):
    """libjpeg-turbo through TorchCodec's ``decode_jpeg`` (torchvision.io's successor).

    Falls back to ``torchvision.io.decode_jpeg`` where TorchCodec is not installed.
    """

    name = "torchvision"
    # TorchCodec always applies EXIF orientation; torchvision.io leaves it alone
    applies_orientation = torchcodec_decode_jpeg is not None

    def decode(self, data: bytes, *, reduce: int = 1) -> torch.Tensor:
        if data[:2] != b"\xff\xd8":  # not a JPEG: libjpeg-only decoder, Pillow does the rest
            return PilDecoder().decode(data)
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if torchcodec_decode_jpeg is not None:
            return torchcodec_decode_jpeg(encoded, mode="RGB")
        return torchvision_decode_jpeg(encoded, mode=ImageReadMode.RGB)


class NvjpegDecoder(Decoder):
    """nvJPEG through TorchCodec (through torchvision.io where TorchCodec is not installed):
    one call decodes a whole batch on the GPU.

    The batch is decoded in the training process, after the encoded bytes (4-10x smaller than
    the pixels) crossed the bus. ``decode`` is the CPU path workers take for files nvJPEG is
    not given: non-JPEG files and EXIF-rotated ones (so orientation never depends on nvJPEG).
    On a CPU device ``decode_batch`` runs TorchCodec's CPU decoder: same interface, so the
    path is testable anywhere.
    """

    name = "nvjpeg"
    on_device = True

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if not torch.cuda.is_available():
            return "it needs a CUDA device"
        return None

    def decode(self, data: bytes, *, reduce: int = 1) -> torch.Tensor:
        return PilDecoder().decode(data)

    @staticmethod
    def decode_batch(encoded: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        """Decodes 1-D uint8 tensors of JPEG bytes into ``(3, H, W)`` uint8 on ``device``."""
        if torchcodec_decode_jpeg is None:
            return torchvision_decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
        return list(torchcodec_decode_jpeg(encoded, mode="RGB", device=device))


class DaliDecoder(Decoder):
    """NVIDIA DALI's pipeline (nvJPEG ``mixed`` decode, GPU augmentation): pipeline/dali.py."""

    name = "dali"
    on_device = True
    replaces_loader = True

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if not torch.cuda.is_available():
            return "it needs a CUDA device"
        try:
            import nvidia.dali  # noqa: F401 - optional, and heavy: only asked about here
        except ImportError:
            return 'NVIDIA DALI is not installed: pip install "autotune[dali]"'
        return None

    def decode(self, data: bytes, *, reduce: int = 1) -> torch.Tensor:
        return PilDecoder().decode(data)  # unused: DALI decodes inside its own graph


DECODERS: dict[str, type[Decoder]] = {
    cls.name: cls
    for cls in (
        PilDecoder,
        PilReducedDecoder,
        OpenCvDecoder,
        TorchvisionDecoder,
        NvjpegDecoder,
        DaliDecoder,
    )
}


def get(name: str) -> Decoder:
    """A decoder instance by name (raises ``KeyError`` listing the choices)."""
    try:
        return DECODERS[name]()
    except KeyError:
        raise KeyError(f"unknown decoder {name!r}; choices: {sorted(DECODERS)}") from None
