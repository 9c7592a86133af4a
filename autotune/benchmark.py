"""``python -m autotune.benchmark``: the benchmark's command (``autotune.app.benchmark``)."""

import sys

from autotune.app.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
