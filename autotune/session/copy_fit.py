"""Which prepared copies (the ``cache`` knob) are worth trying here, decided before the
search from the headers of a sample of files: a resized copy only where the recipe leaves
pixels to drop; a decoded copy only where it fits in memory (every worker and rank reads it
from the page cache); either only where the disk under the studies has room for it.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

from autotune.machine import MachineFacts
from autotune.pipeline import prepared
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source
from autotune.session.knobs import Knob

# a resized copy that keeps more of the pixels than this is the dataset again
WORTH_RESIZING = 0.9
# a decoded copy may take this share of the memory available (the rest: the training)
DECODED_MEMORY_SHARE = 0.5
_MIB = 2**20
ONE_EPOCH = (
    "study.epochs=1: preparing a copy decodes every image once, as much as the one epoch it "
    "would serve can save; set study.epochs to the epochs you plan"
)


@dataclass(frozen=True)
class CopyFit:
    """The copies left out here, each with why."""

    left_out: tuple[tuple[str, str], ...] = ()

    def notes(self) -> list[str]:
        """One line per reason: ``cache=resized, decoded left out: ...``."""
        reasons = dict.fromkeys(why for _, why in self.left_out)
        return [
            f"cache={', '.join(k for k, w in self.left_out if w == why)} left out: {why}"
            for why in reasons
        ]

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind, _ in self.left_out)

    def narrowed(self, knob: Knob, notes: list[str]) -> Knob:
        """The cache knob without the copies left out here, each noted."""
        if knob.type != "choice" or not set(self.kinds) & set(knob.choices):
            return knob
        notes += CopyFit(tuple((k, why) for k, why in self.left_out if k in knob.choices)).notes()
        kept = tuple(c for c in knob.choices if c not in self.kinds)
        if len(kept) == 1:
            return dataclasses.replace(knob, type="fixed", choices=(), value=kept[0])
        return dataclasses.replace(knob, choices=kept)


def measure(
    source: Source,
    recipe: Recipe,
    facts: MachineFacts,
    *,
    root: Path,
    budget_gb: float | None,
    epochs: int,
) -> CopyFit:
    """What ``cache`` may try for ``source`` and ``recipe``, copies kept under ``root``;
    ``budget_gb``: ``study.memory_budget_gb``, the most a decoded copy may take if set;
    ``epochs``: ``study.epochs``, over which a copy's preparation is shared."""
    if epochs == 1:  # no trial spent on what cannot win
        return CopyFit(tuple((kind, ONE_EPOCH) for kind in ("resized", "decoded")))
    left_out: list[tuple[str, str]] = []
    sampled = prepared.SampledSizes.of(source, recipe)  # one read of the headers
    share = sampled.pixel_share()
    if share > WORTH_RESIZING:
        left_out.append(
            (
                "resized",
                f"the recipe needs {share:.0%} of these images' pixels (its smallest crop "
                "keeps its output's pixels): a resized copy would be the dataset again",
            )
        )
    decoded = sampled.estimate_bytes("decoded")
    memory = DECODED_MEMORY_SHARE * facts.memory_available_bytes
    if budget_gb is not None:
        memory = min(memory, budget_gb * 2**30)
    if decoded > memory:
        left_out.append(
            (
                "decoded",
                f"its pixels would take ~{decoded // _MIB} MiB, over the {memory // _MIB:.0f} "
                "MiB it may hold in memory",
            )
        )
    free = _free_bytes(root)
    for kind in ("resized", "decoded"):
        if kind in dict(left_out):
            continue
        size = decoded if kind == "decoded" else sampled.estimate_bytes(kind)
        if prepared.find(source, recipe, kind, root) is None and size > 0.9 * free:
            left_out.append(
                (kind, f"~{size // _MIB} MiB, and {free // _MIB} MiB are free under {root}")
            )
    return CopyFit(tuple(left_out))


def _free_bytes(root: Path) -> int:
    folder = Path(root)
    while not folder.exists():
        folder = folder.parent
    return shutil.disk_usage(folder).free
