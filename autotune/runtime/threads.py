"""How many threads torch and OpenCV use, set for a block of code and restored after it.

Example:
    >>> with threads(1):   # as in a DataLoader worker
    ...     profile_stages(source, recipe, "pil")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import cv2
import torch


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[None]:
    """torch (and OpenCV) run with ``n`` threads inside; None leaves them as they are. What
    was set before is restored on the way out."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    cv2_before = cv2.getNumThreads()
    torch.set_num_threads(n)
    cv2.setNumThreads(0 if n == 1 else n)  # 0: OpenCV's own pool off, as in the workers
    try:
        yield
    finally:
        torch.set_num_threads(before)
        cv2.setNumThreads(cv2_before)
