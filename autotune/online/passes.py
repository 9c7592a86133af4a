"""How much of each epoch the training loop reads. A loop that leaves its epochs early (a
number of steps an epoch; Lightning's ``limit_train_batches``) reads each pass as its epoch,
once two passes in a row were left at the same batch: a peek at a first batch, or a pass
another pass nested in it interrupted, is not such a loop. The step of a pass's last batch is
never timed, as the loop asks for no batch after it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Passes:
    """The batches the loop asks for of each epoch, and where it leaves them."""

    asked: int = 0  # of the epoch under way
    left_after: int = 0  # where it leaves its epochs early: the batches it reads of one
    _last_left: int = 0  # of the last pass it left early (0: it read the last epoch whole)
    longest: int = 0  # batches of the longest epoch read whole (a bucketing sampler's vary)

    def asked_for(self, delivered: int) -> None:
        """The loop asks for the epoch's batch ``delivered`` (counted from 0)."""
        self.asked = delivered + 1

    def left(self) -> None:
        """The pass under way was left early: the second in a row left at the same batch
        makes a pass so long the loop's epoch from now."""
        batches, self.asked = self.asked, 0
        if batches and batches == self._last_left:
            self.left_after = batches
        self._last_left = batches

    def raised(self) -> None:
        """The loader raised in the pass under way (a worker that died, your Dataset's
        error): a loop that leaves it for the next epoch does not leave its epochs early."""
        self.asked = 0

    def ended(self, delivered: int) -> None:
        """An epoch of ``delivered`` batches read whole: the loop reads its epochs so."""
        self.asked = self.left_after = self._last_left = 0
        self.longest = max(self.longest, delivered)

    def follows(self, earlier: Passes, epoch: int | None) -> None:
        """A loader made anew in place of ``earlier``'s reads as the loop read that one: a pass
        it was dropped in was left there (``left``: two in a row at one batch make the loop's
        epoch); else to its ``epoch``'s last batch and no more, its reading taken as that
        batch is handed out (``DataLoader.last_batch``: the loop may drop the loader there,
        asking for none after it, as Lightning does), so that batch's step is never timed."""
        self.left_after, self._last_left = earlier.left_after, earlier._last_left
        if earlier.asked not in (0, epoch):  # 0: it ended; ``epoch``: read to its last batch
            self.asked = earlier.asked
            self.left()
        if epoch and not self.left_after:
            self.left_after = epoch

    def length(self, epoch: int | None) -> int | None:
        """An epoch's batches (``epoch``: None where unknown), or a pass's the loop leaves."""
        left = self.left_after
        return min(left, epoch or left) if left else epoch

    def timeable(self, epoch: int | None) -> int | None:
        """The batches of a pass a setting can be timed in: an epoch's (``epoch``), or all
        but the last of a pass the loop leaves."""
        return self.left_after - 1 if self.left_after else epoch
