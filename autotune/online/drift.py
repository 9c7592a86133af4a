"""When the kept setting's rate has moved: the conditions it was chosen in (a cold page cache,
a neighbour's job, a thermal limit) have changed, and the choice is measured again.

Each settled reading of the kept setting, once exploring has settled, is compared with the
reading it was kept on (in a run that starts from a setting an earlier run kept, with the
run's own first reading of it). A reading off by more than the noise (the larger of the two
readings' spreads, and never less than ``FLOOR``) counts, a fall by a factor as a rise by the
same factor (a rate cannot fall by more than 100 %, and a spread can pass that);
``SUSTAINED`` such readings in a row, off the same way and timing ``SUSTAINED_S`` seconds
together, are a drift: one reading off is noise, a span of them is the machine.
"""

from __future__ import annotations

import math

from autotune.online.meter import Reading

FLOOR = 0.10  # the least relative change that can count: a trial's target spread
SUSTAINED = 3  # readings in a row off the same way,
SUSTAINED_S = 3.0  # timing this many seconds together (short readings are noisier)


class DriftWatch:
    """Watches the kept setting's readings against the one it was kept on."""

    def __init__(self, kept: Reading | None = None) -> None:
        self.kept = kept  # None: the first reading is the one to compare with
        self._off: list[tuple[int, float]] = []  # each reading off in a row: its sign, seconds

    def drifted(self, reading: Reading) -> bool:
        """Whether ``reading``, with those before it, shows the rate has moved."""
        if self.kept is None:
            self.kept = reading
            return False
        kept, rate = self.kept.samples_per_s, reading.samples_per_s
        if kept <= 0:
            return False
        # as factors: a tenfold fall is off however noisy the readings, as a tenfold rise is
        factor = math.log(rate / kept) if rate > 0 else -math.inf
        noise = max(self.kept.spread, reading.spread, FLOOR)
        if abs(factor) <= math.log1p(noise):
            self._off = []
            return False
        sign = 1 if factor > 0 else -1
        self._off = [*[off for off in self._off if off[0] == sign], (sign, reading.seconds)]
        seconds = sum(s for _, s in self._off)
        return len(self._off) >= SUSTAINED and seconds >= SUSTAINED_S
