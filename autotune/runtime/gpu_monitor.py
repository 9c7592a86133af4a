"""GPU utilization sampled through NVML while a trial's timed windows run.

``nvidia-smi`` shows the same figure: the share of the last sample period in which a kernel
ran. A data-bound job shows it low. Without a GPU (or NVML) there is no sampler and the figure
is absent, never zero.

Example:
    >>> with gpu_monitor.open_sampler(torch.device("cuda")) as sampler:
    ...     sampler.start(); train(); sampler.stop()
    ...     print(sampler.mean_pct)
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator

import torch

log = logging.getLogger(__name__)

INTERVAL_S = 0.1  # NVML's own utilization period is 1/6 s to 1 s: 10 Hz sees every update

Reader = Callable[[], float | None]  # percent busy now, or None when it could not be read


class UtilizationSampler:
    """Calls ``read`` every ``interval_s`` seconds between ``start()`` and ``stop()``, from a
    background thread, and averages what it read over all the spans it sampled.

    ``start()`` reads once at once, so even a span shorter than the interval counts. The
    reader is injectable: NVML in trials, any callable in tests.
    """

    def __init__(self, read: Reader, *, interval_s: float = INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError(f"`interval_s > 0` must hold, but got ({interval_s=}).")
        self._read, self.interval_s = read, interval_s
        self._values: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the sampler is already running: stop() it first")
        self._stop.clear()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

    @property
    def samples(self) -> int:
        with self._lock:
            return len(self._values)

    @property
    def mean_pct(self) -> float | None:
        """Mean utilization (percent) over every sampled span; None if nothing was read."""
        with self._lock:
            return sum(self._values) / len(self._values) if self._values else None

    def _sample(self) -> None:
        value = self._read()
        if value is not None:
            with self._lock:
                self._values.append(float(value))

    def _run(self) -> None:
        # wait() returns early when stopped: no read after stop(), and a fixed period
        while not self._stop.wait(self.interval_s):
            self._sample()


def _nvml_handle(pynvml, cuda_index: int):  # noqa: ANN001, ANN202 - pynvml types
    """The NVML handle of CUDA device ``cuda_index`` (CUDA_VISIBLE_DEVICES renumbers them)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return pynvml.nvmlDeviceGetHandleByIndex(cuda_index)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if cuda_index >= len(ids) or ids[cuda_index].startswith("-"):
        raise LookupError(f"CUDA device {cuda_index} is hidden by CUDA_VISIBLE_DEVICES")
    chosen = ids[cuda_index]
    if chosen.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(chosen))
    return pynvml.nvmlDeviceGetHandleByUUID(chosen)


@contextlib.contextmanager
def nvml_reader(device: torch.device) -> Iterator[Reader | None]:
    """A reader of ``device``'s utilization through NVML, or None where there is none (not a
    CUDA device, nvidia-ml-py not installed, no driver, no such GPU)."""
    if device.type != "cuda":
        yield None
        return
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.debug("NVML unavailable, GPU utilization not sampled: %s", exc)
        yield None
        return
    try:
        try:
            index = device.index
            if index is None:  # torch's current device; asking would initialise CUDA
                index = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
            handle = _nvml_handle(pynvml, index)
        except (pynvml.NVMLError, LookupError) as exc:
            log.debug("no NVML handle for %s: %s", device, exc)
            yield None
            return

        def read() -> float | None:
            try:
                return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except pynvml.NVMLError:
                return None

        yield read
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


@contextlib.contextmanager
def open_sampler(
    device: torch.device, *, interval_s: float = INTERVAL_S
) -> Iterator[UtilizationSampler | None]:
    """A sampler of ``device``'s utilization, or None without a GPU (the figure is absent)."""
    with nvml_reader(device) as read:
        sampler = UtilizationSampler(read, interval_s=interval_s) if read is not None else None
        try:
            yield sampler
        finally:
            if sampler is not None:
                sampler.stop()
