"""``python -m autotune.shard [dataset overrides] out=DIR [samples_per_shard=N]``: writes the
dataset as WebDataset tar shards, for ``dataset._target_=autotune.pipeline.shards.Shards``.

The dataset is named as for a study (``dataset=imagefolder dataset.root=...``, a synthetic set,
or ``dataset._target_=...`` for a Dataset of your own).
"""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.app import exit_codes
from autotune.app.composition import compose, to_config
from autotune.errors import UsageError
from autotune.pipeline import shards
from autotune.session.data import load_source

OWN_KEYS = ("out=", "samples_per_shard=")


def _own(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """This command's own ``key=value`` arguments, and the config overrides."""
    own = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith(OWN_KEYS)}
    return own, [a for a in args if not a.startswith(OWN_KEYS)]


def run(args: list[str]) -> int:
    own, overrides = _own(args)
    if not own.get("out"):
        raise UsageError("out is not set: add out=DIR (a new folder for the shards)")
    per_shard = own.get("samples_per_shard", "1000")
    if not per_shard.isdigit():
        raise UsageError(f"samples_per_shard must be a whole number, got {per_shard!r}")
    conf = to_config(compose(overrides))
    data, _ = load_source(conf.dataset)
    out = Path(own["out"]).expanduser()
    written = shards.write(
        data, out, samples_per_shard=int(per_shard), progress=sys.stderr.isatty()
    )
    print(
        f"wrote {written.samples} samples in {len(written.shards)} shards to {out}; train on "
        f"them with dataset._target_=autotune.pipeline.shards.Shards dataset.kwargs.root={out}",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    return exit_codes.exit_code("autotune.shard", lambda: run(args))
