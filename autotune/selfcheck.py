"""``python -m autotune.selfcheck``: the self-check's command (``autotune.app.selfcheck``)."""

import sys

from autotune.app.selfcheck import main

if __name__ == "__main__":
    sys.exit(main())
