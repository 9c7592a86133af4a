"""``python -m autotune.shard``: writes a dataset as WebDataset shards (``autotune.app.shard``)."""

import sys

from autotune.app.shard import main

if __name__ == "__main__":
    sys.exit(main())
