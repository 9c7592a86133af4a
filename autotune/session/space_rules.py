"""The rules a search space's knobs keep together, checked before any trial runs: the
decoder declared before the choices that follow it, and each worker-only knob tried only
where workers are.
"""

from __future__ import annotations

from autotune.errors import UsageError
from autotune.pipeline.config import AS_IS_FIXED, NEED_WORKERS
from autotune.session.knobs import Knob

# The tuner's own pipeline choices: the user's pipeline "as it is" keeps them as they are.
AS_IS_KEEPS = tuple(name for name in AS_IS_FIXED if name != "decoder")


def check_decoder_first(declared: list[Knob]) -> None:
    """The pipeline choices as it is keeps must follow the decoder: whether they apply is
    decided by the decoder's value."""
    early = [k.name for k in declared if k.name in AS_IS_KEEPS]
    if early:
        raise UsageError(
            f"search_space.knobs: declare decoder before {', '.join(early)} (they do not "
            "apply to decoder=as_is, which the decoder decides first)"
        )


def check_worker_conditions(knobs: list[Knob]) -> None:
    by_name = {k.name: k for k in knobs}
    workers = by_name.get("num_workers")
    zero_workers_possible = workers is None or 0 in workers.values()
    for name in NEED_WORKERS:
        knob = by_name.get(name)
        if knob is None or not zero_workers_possible:
            continue
        if (
            knob.when is None
            or knob.when.knob != "num_workers"
            or knob.when.holds({"num_workers": 0})
        ):
            raise UsageError(
                f'search_space.knobs.{name} needs num_workers > 0: add when: "num_workers > 0"'
            )
