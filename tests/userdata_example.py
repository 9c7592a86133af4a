"""A user's own project, as the tests use it: a Dataset whose ``__getitem__`` does real CPU
work (a spectrogram of a generated audio clip, torch.stft), a padding collate, and a small
model. Importable as ``userdata_example`` (the tests' folder is on the path)."""

from __future__ import annotations

import math
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset, get_worker_info


class Spectrograms(Dataset):
    """``count`` seeded clips of a tone per class in noise; each read computes its log
    spectrogram ``(1, freq, time)``. ``vary``: clips of different lengths (needs a padding
    collate)."""

    def __init__(
        self,
        count: int = 64,
        num_classes: int = 4,
        seconds: float = 0.5,
        rate: int = 16_000,
        vary: bool = False,
        seed: int = 0,
    ) -> None:
        self.count, self.seconds, self.rate, self.vary, self.seed = (
            count,
            seconds,
            rate,
            vary,
            seed,
        )
        self.classes = [f"tone{i}" for i in range(num_classes)]
        self.window = torch.hann_window(512)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = index % len(self.classes)
        scale = 0.5 + torch.rand(1, generator=generator).item() if self.vary else 1.0
        samples = int(self.seconds * self.rate * scale)
        t = torch.arange(samples) / self.rate
        wave = torch.sin(2 * math.pi * (200 + 150 * label) * t)
        wave = wave + 0.3 * torch.randn(samples, generator=generator)
        spec = torch.stft(wave, 512, 128, window=self.window, return_complex=True)
        return spec.abs().log1p().unsqueeze(0), label


class WavFiles(Dataset):
    """Clips read from 16-bit WAV files in class folders under ``root`` (``write_wavs``), with
    the standard library's ``wave``, on every read; each read computes its log spectrogram
    as ``Spectrograms`` does."""

    def __init__(self, root: str) -> None:
        self.paths = sorted(Path(root).glob("*/*.wav"))
        if not self.paths:
            raise FileNotFoundError(f"no .wav files in class folders under {root}")
        self.classes = sorted({path.parent.name for path in self.paths})
        self.window = torch.hann_window(512)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path = self.paths[index]
        with wave.open(str(path), "rb") as clip:
            frames = clip.readframes(clip.getnframes())
        wave_ = torch.frombuffer(bytearray(frames), dtype=torch.int16).float() / 32768
        spec = torch.stft(wave_, 512, 128, window=self.window, return_complex=True)
        return spec.abs().log1p().unsqueeze(0), self.classes.index(path.parent.name)


def write_wavs(root: Path, count: int, *, vary: bool = True) -> Path:
    """``count`` of ``Spectrograms``' clips as WAV files in a folder per class under ``root``."""
    clips = Spectrograms(count=count, vary=vary)
    for index in range(count):
        label = index % len(clips.classes)
        generator = torch.Generator().manual_seed(index)
        seconds = clips.seconds * (0.5 + torch.rand(1, generator=generator).item() if vary else 1)
        t = torch.arange(int(seconds * clips.rate)) / clips.rate
        tone = torch.sin(2 * math.pi * (200 + 150 * label) * t) * 0.6
        pcm = (tone + 0.2 * torch.randn(len(t), generator=generator)).clamp(-1, 1)
        folder = root / clips.classes[label]
        folder.mkdir(parents=True, exist_ok=True)
        with wave.open(str(folder / f"{index:04d}.wav"), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(clips.rate)
            out.writeframes((pcm * 32767).to(torch.int16).numpy().tobytes())
    return root


def pad_collate(samples: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pads each spectrogram's time axis to the batch's longest."""
    longest = max(spec.shape[-1] for spec, _ in samples)
    padded = [nn.functional.pad(spec, (0, longest - spec.shape[-1])) for spec, _ in samples]
    return torch.stack(padded), torch.tensor([label for _, label in samples])


def pad_dict_collate(samples: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """Pads as ``pad_collate`` does, into a dict that also keeps each clip's true length."""
    specs, labels = pad_collate(samples)
    lengths = torch.tensor([spec.shape[-1] for spec, _ in samples])
    return {"spec": specs, "lengths": lengths, "label": labels}


def smoothed_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """A loss of the user's own, on the dict batches of ``pad_dict_collate``."""
    logits = model(batch["spec"])
    return nn.functional.cross_entropy(logits.float(), batch["label"], label_smoothing=0.1)


class SpecNet(nn.Module):
    def __init__(self, num_classes: int = 4, width: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, width, 5, stride=4),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(width, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def spectrograms(count: int = 64) -> Spectrograms:
    """A factory: ``dataset._target_`` may name a function that returns the Dataset."""
    return Spectrograms(count=count)


class Broken(Dataset):
    def __init__(self) -> None:
        raise RuntimeError("no such folder: /nowhere")


class ToneStream(IterableDataset):
    """The same clips as a stream, ``count`` per epoch. ``split``: each DataLoader worker reads
    its own share (``get_worker_info``); without it every worker reads them all. ``sized``:
    it states its length (``samples``); without, it has none."""

    def __init__(self, count: int = 64, split: bool = True, sized: bool = True) -> None:
        self.clips, self.split = Spectrograms(count=count), split
        if sized:
            self.samples = count  # an epoch's length, as a stream may state it

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        indices = range(len(self.clips))
        info = get_worker_info()
        if self.split and info is not None:
            indices = indices[info.id :: info.num_workers]
        for index in indices:
            yield self.clips[index]


class WaitingReads(Spectrograms):
    """Each read first waits ``wait_ms``, as a read from slow storage waits, off the CPU."""

    def __init__(self, count: int = 16, wait_ms: float = 20.0) -> None:
        super().__init__(count=count)
        self.wait_s = wait_ms / 1000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.wait_s)
        return super().__getitem__(index)


class Locked(Spectrograms):
    """Holds a lock, which pickle refuses: workers started by spawn cannot get it."""

    def __init__(self, count: int = 8) -> None:
        super().__init__(count=count)
        self.lock = threading.Lock()


class LazyHandle(Spectrograms):
    """Opens its handle lazily, on the first read (as one should for workers): the object
    read once in this process then holds a lock, which pickle refuses."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not hasattr(self, "handle"):
            self.handle = threading.Lock()
        return super().__getitem__(index)


class NotADataset:
    def __init__(self) -> None:
        self.items = [1, 2, 3]


class PooledNet(nn.Module):
    """The spectrogram's mean into one linear layer: a model Inductor compiles in seconds,
    for tests of compiling rather than of the model."""

    def __init__(self, num_classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)
