"""``python -m autotune [overrides]``."""

import sys

from autotune.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
