"""``python -m autotune.shard``: writes a dataset as WebDataset shards (``autotune.app.shard``)."""

from autotune.app.exit_codes import exit_now
from autotune.app.shard import main

if __name__ == "__main__":
    exit_now(main())
