"""When the kept setting's rate has moved: the conditions it was chosen in (a cold page cache,
a neighbour's job, a thermal limit) have changed, and the choice is measured again.

Each settled reading of the kept setting, once exploring has settled, is compared with the
reading it was kept on (in a run that starts from a setting an earlier run kept, with the
run's own first reading of it). A reading off by more than the noise (the larger of the two
readings' spreads, and never less than ``FLOOR``) counts, a fall by a factor as a rise by the
same factor (a rate cannot fall by more than 100 %, and a spread can pass that);
``SUSTAINED`` such readings in a row, off the same way and timing ``SUSTAINED_S`` seconds
together, are a drift: one reading off is noise, a span of them is the machine.

A run that starts at a setting an earlier run kept knows the rate it was kept at. Its first
reading off that rate by more than a factor of ``JOB_CHANGED`` (either way, and beyond the
reading's own spread) explores at once: the loader's fingerprint cannot see the Dataset's
transform, the model or the step, and a loop that runs at half or twice the rate it was kept
at is not the job the setting was chosen for (or the machine is not the one it was: a
neighbour's job holding its CPUs). A machine whose speed moves by a third between runs, as
shared machines do, is not taken for another job.
"""

from __future__ import annotations

import math

from autotune.online.meter import Reading

FLOOR = 0.10  # the least relative change that can count: a trial's target spread
SUSTAINED = 3  # readings in a row off the same way,
SUSTAINED_S = 3.0  # timing this many seconds together (short readings are noisier)
JOB_CHANGED = 1.5  # the factor a run's first reading is off an earlier run's rate for it


class DriftWatch:
    """Watches the kept setting's readings against the one it was kept on."""

    def __init__(self, kept: Reading | None = None, *, kept_rate: float | None = None) -> None:
        self.kept = kept  # None: the first reading is the one to compare with
        self._kept_rate = kept_rate  # samples/s an earlier run kept the setting at, if known
        self._off: list[tuple[int, float]] = []  # each reading off in a row: its sign, seconds
        self.why = "its rate moved"  # what the last drift found

    def drifted(self, reading: Reading) -> bool:
        """Whether ``reading``, with those before it, shows the rate has moved."""
        if self.kept is None:
            self.kept = reading
            return self._unlike_kept_rate(reading)
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

    def _unlike_kept_rate(self, reading: Reading) -> bool:
        """Whether the run's first reading is off the rate an earlier run kept the setting at
        by more than ``JOB_CHANGED`` (and its own spread)."""
        kept, rate = self._kept_rate, reading.samples_per_s
        if not kept or kept <= 0:
            return False
        factor = abs(math.log(rate / kept)) if rate > 0 else math.inf
        if factor <= max(math.log(JOB_CHANGED), math.log1p(reading.spread)):
            return False
        self.why = f"reads {rate:.0f} samples/s, kept at {kept:.0f} by an earlier run"
        return True
