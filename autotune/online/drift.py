"""When the kept setting's rate has moved: the conditions it was chosen in (a cold page cache,
a neighbour's job, a thermal limit) have changed, and the choice is measured again.

Each settled reading of the kept setting, once exploring has settled, is compared with the
reading it was kept on. A reading off by more than the noise (the larger of the two readings'
spreads, and never less than ``FLOOR``) counts; ``SUSTAINED`` such readings in a row, off the
same way, are a drift: one reading off is noise, a span of them is the machine.
"""

from __future__ import annotations

from autotune.online.meter import Reading

FLOOR = 0.10  # the least relative change that can count: a trial's target spread
SUSTAINED = 3  # readings in a row off the same way


class DriftWatch:
    """Watches the kept setting's readings against the one it was kept on."""

    def __init__(self, kept: Reading) -> None:
        self.kept = kept
        self._off: list[int] = []  # the sign of each reading off, in a row

    def drifted(self, reading: Reading) -> bool:
        """Whether ``reading``, with those before it, shows the rate has moved."""
        change = (
            reading.samples_per_s / self.kept.samples_per_s - 1 if self.kept.samples_per_s else 0.0
        )
        noise = max(self.kept.spread, reading.spread, FLOOR)
        if abs(change) <= noise:
            self._off = []
            return False
        sign = 1 if change > 0 else -1
        self._off = [*[s for s in self._off if s == sign], sign]
        return len(self._off) >= SUSTAINED
