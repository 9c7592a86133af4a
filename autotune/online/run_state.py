"""torch's DataLoader whose own run state (its workers, its tuning) is kept apart from its
arguments.

Lightning re-creates a loader to put a DistributedSampler in: from its arguments, passed again
or read from the attributes of their names (as torch keeps its own), and then sets on the new
loader what was set through ``__setattr__`` on the old; it shuts a loader's workers down by
setting ``_iterator`` to None. And a loader pickled (spawned workers, a copy) carries its
arguments only. So the run's state is set past ``__setattr__`` (``_set``), left out of a
pickle, and made afresh (``_fresh``) where a loader is unpickled.
"""

from __future__ import annotations

from typing import Any

import torch.utils.data

from autotune.online.meter import Meter
from autotune.online.tuning import Tuning


class RunState(torch.utils.data.DataLoader):
    """A DataLoader with a run's own state (``_fresh``'s names) beside torch's arguments."""

    tuning: Tuning | None  # what asks for the switches: made as the first epoch starts
    meter: Meter | None  # times the current settings (from the first epoch's start)
    made_anew = False  # goes on from a loader the loop dropped: each epoch may be its last

    def _fresh(self) -> dict[str, Any]:
        """The loader's own state before its first epoch: its names are the run's."""
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        """What torch's loader pickles, its arguments: unpickled, it starts afresh (the run's
        own state, its workers and tuning, stays in this process)."""
        run = self._fresh().keys()
        return {name: value for name, value in vars(self).items() if name not in run}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._set(**self._fresh())

    @property
    def _iterator(self) -> Any:  # where torch's keeps it, and Lightning shuts its workers down
        """The kept loader's iterator, its workers alive between epochs (None: none kept)."""
        return inner.kept_iterator if (inner := vars(self).get("_inner")) is not None else None

    @_iterator.setter
    def _iterator(self, value: Any) -> None:  # None: torch's __init__, or Lightning's end
        if value is None and (inner := vars(self).get("_inner")) is not None:
            inner.release()

    @property
    def _tuning(self) -> Tuning:  # in an epoch, and between epochs
        assert self.tuning is not None
        return self.tuning

    @property
    def _meter(self) -> Meter:
        assert self.meter is not None
        return self.meter

    def _set(self, **state: Any) -> None:
        """Sets the loader's own state past ``__setattr__``, which Lightning records."""
        vars(self).update(state)
