"""Whether the training loop changes its Dataset between epochs, which workers that persist
would not see.

A worker reads a copy of the Dataset made as it started. Workers that persist keep theirs for
the whole run; workers that do not start again each epoch, with the Dataset as it then is. A
loop that sets something on its Dataset between epochs (``dataset.epoch = epoch``, a
curriculum's stage, an augmentation's strength) and asked for workers that do not persist
relies on that, and ``autotune.DataLoader`` must not take it away by keeping workers alive.

What is compared: the Dataset's own attributes, and those of the Datasets it wraps
(``Subset``, ``ConcatDataset``), each by identity, from an epoch's end to the next epoch's
start: a value set again is another object. What the Dataset sets on itself while it reads
(a file it opens at its first read) is set within an epoch and not counted, except where the
loop left that epoch early (``break``, Lightning's ``limit_train_batches``): there the epoch's
start is compared, to miss nothing the loop set. An epoch read to its last batch ends there,
though the loop asks for none after it (Lightning, knowing the length). An in-place change to
a list it holds is not seen.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset

Attributes = dict[str, Any]  # attribute path -> its value, held to be compared by identity
_NONE = object()  # an attribute one side does not have


def attributes(dataset: Any, prefix: str = "", depth: int = 2) -> Attributes:
    """``dataset``'s attributes by name (``dataset.<name>``, a wrapped one's
    ``dataset.<name>.<its name>``), down to ``depth`` Datasets deep."""
    found: Attributes = {}
    for name, value in (getattr(dataset, "__dict__", None) or {}).items():
        path = f"{prefix}{name}"
        found[path] = value
        if depth and isinstance(value, Dataset):
            found.update(attributes(value, f"{path}.", depth - 1))
        elif depth and isinstance(value, (list, tuple)) and 0 < len(value) <= 64:
            for index, item in enumerate(value):
                if isinstance(item, Dataset):
                    found.update(attributes(item, f"{path}[{index}].", depth - 1))
    return found


def changed(before: Attributes, after: Attributes) -> list[str]:
    """The attributes set (or added, or removed) between the two, by name."""
    names = before.keys() | after.keys()
    return sorted(n for n in names if before.get(n, _NONE) is not after.get(n, _NONE))


class BetweenEpochs:
    """The Dataset's attributes as the last epoch ended (or, where the loop left it early, as
    it started), against the next epoch's start."""

    def __init__(self) -> None:
        self._then: Attributes | None = None

    def ended(self, dataset: Any) -> None:
        self._then = attributes(dataset)

    def changed(self, dataset: Any) -> list[str]:
        """What was set on ``dataset`` since the last epoch ended, or since it started where
        the loop left it early (what the Dataset set on itself as it read counts then too)."""
        then, self._then = self._then, attributes(dataset)
        return changed(then, self._then) if then is not None else []


def renewed_note(names: list[str]) -> str:
    """What the run does about it, in one line."""
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return (
        f"the loop changes its Dataset between epochs ({shown}), which workers that persist "
        "would not see: none are kept alive, as you asked"
    )
