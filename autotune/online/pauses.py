"""A pause of the training loop's own between two batches of an epoch (it validates or saves
mid-epoch, as Lightning's ``val_check_interval`` has it): a step far longer than its usual one.
Its time is the loop's, as between epochs: a span timing it would read the setting slower and
noisier, whatever the setting, and might keep a slower one."""

from __future__ import annotations

# a step this many times the loop's usual one, and at least this long, is a pause of its own
PAUSE_STEPS, PAUSE_MIN_S = 10, 0.2
NEW_USUAL = 3  # such steps in a row are the loop's usual step now (its work grew), no pauses


class StepWatch:
    """The loop's usual step (from a batch received to the next asked for), and its pauses."""

    def __init__(self) -> None:
        self._received_at: float | None = None
        self._usual: float | None = None
        self.batches = 0  # received since a warm-up began: a pause's, the loop's between two
        self._in_a_row = 0  # pauses
        self.apart = 0  # the fewest batches the loop read up to a pause (0: none yet)

    def received(self, now: float) -> None:
        """The loop has a batch: its step begins."""
        self._received_at, self.batches = now, self.batches + 1

    def forget(self) -> None:
        """A warm-up begins (an epoch's start, a break, a pause): its first step unwatched."""
        self._received_at, self.batches = None, 0

    def paused(self, now: float) -> float:
        """The step ending now (the loop asks for its next batch), where it was a pause;
        else 0.0, and the usual step follows it."""
        if self._received_at is None:
            return 0.0
        step, usual = now - self._received_at, self._usual
        long = usual is not None and step > max(PAUSE_STEPS * usual, PAUSE_MIN_S)
        self._in_a_row = self._in_a_row + 1 if long else 0
        if long and self._in_a_row < NEW_USUAL:
            self.apart = min(self.apart or self.batches, self.batches)
            return step
        self._usual = step if usual is None or long else usual + (step - usual) / 8
        return 0.0
