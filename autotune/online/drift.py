"""When the kept setting's rate has moved: the conditions it was chosen in (a cold page cache,
a neighbour's job, a thermal limit) have changed, and the choice is measured again.

Each settled reading of the kept setting, once exploring has settled, is compared with the
reading it was kept on (in a run that starts from a setting an earlier run kept, with the
run's own first reading of it). A reading off by more than the noise (the larger of the two
readings' spreads, and never less than ``FLOOR``) counts, a fall by a factor as a rise by the
same factor (a rate cannot fall by more than 100 %, and a spread can pass that);
``SUSTAINED`` such readings in a row, off the same way and timing ``SUSTAINED_S`` seconds
together, are a drift: one reading off is noise, a span of them is the machine.

A run that starts at a setting an earlier run kept knows the rate it was kept at, and its
first readings are compared with that rate instead: ``SUSTAINED`` of them in a row off it by
more than a factor of ``JOB_CHANGED`` (the same way, beyond their own spread, over
``SUSTAINED_S``) explore again. The loader's fingerprint cannot see the Dataset's transform,
the model or the step, and a loop that runs at half or twice the rate it was kept at is not
the job the setting was chosen for (or the machine is not the one it was: a neighbour's job
holding its CPUs). A machine whose speed moves by a third between runs, as shared machines
do, is not taken for another job; the first reading within the factor is the run's own
reference from there.
"""

from __future__ import annotations

import math

from autotune.online.note import rate_of
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig

FLOOR = 0.10  # the least relative change that can count: a trial's target spread
SUSTAINED = 3  # readings in a row off the same way,
SUSTAINED_S = 3.0  # timing this many seconds together (short readings are noisier)
JOB_CHANGED = 1.5  # the factor a run's first readings are off an earlier run's rate for it


class DriftWatch:
    """Watches the kept setting's readings against the one it was kept on."""

    def __init__(self, kept: Reading | None = None, *, kept_rate: float | None = None) -> None:
        self.kept = kept  # None: the first reading is the one to compare with
        # samples/s an earlier run kept the setting at (None: unknown, or no rate at all)
        self._kept_rate = rate_of(kept_rate)
        self._off: list[tuple[int, float]] = []  # each reading off in a row: its sign, seconds
        self.why = "its rate moved"  # what the last drift found
        # a start of the watched setting's workers, charged to its readings over whole epochs
        # as the explorer charges the readings it keeps (``budget.charged``)
        self.restarts: dict[PipelineConfig, float] = {}

    def drifted(self, reading: Reading) -> bool:
        """Whether ``reading``, with those before it, shows the rate has moved (in a run's
        first readings: that the job is not the one the setting was kept for)."""
        if self._kept_rate is not None:
            return self._unlike_kept_rate(reading)
        if self.kept is None:
            self.kept = reading
            return False
        if self.kept.samples_per_s <= 0:
            return False
        noise = max(self.kept.spread, reading.spread, FLOOR)
        return self._off_in_a_row(self.kept.samples_per_s, reading, noise)

    def _unlike_kept_rate(self, reading: Reading) -> bool:
        """Whether the run's first readings are off the rate an earlier run kept the setting
        at by more than ``JOB_CHANGED``; the first within it is the run's reference after."""
        kept = self._kept_rate
        assert kept is not None
        if self._off_in_a_row(kept, reading, max(JOB_CHANGED - 1, reading.spread)):
            rate = reading.samples_per_s
            self.why = f"reads {rate:.0f} samples/s, kept at {kept:.0f} by an earlier run"
            return True
        if not self._off:  # this job: watched against its own reading from here
            self._kept_rate, self.kept = None, reading
        return False

    def _off_in_a_row(self, kept: float, reading: Reading, noise: float) -> bool:
        """Counts ``reading`` off ``kept`` by more than ``noise`` (as factors: a tenfold fall
        is off however noisy the readings, as a tenfold rise is); whether enough are."""
        rate = reading.samples_per_s
        factor = math.log(rate / kept) if rate > 0 else -math.inf
        if abs(factor) <= math.log1p(noise):
            self._off = []
            return False
        sign = 1 if factor > 0 else -1
        self._off = [*[off for off in self._off if off[0] == sign], (sign, reading.seconds)]
        seconds = sum(s for _, s in self._off)
        return len(self._off) >= SUSTAINED and seconds >= SUSTAINED_S
