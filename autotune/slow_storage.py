"""``python -m autotune.slow_storage``: a folder behind storage that makes reads wait
(``autotune.app.slow_storage``)."""

import sys

from autotune.app.slow_storage import main

if __name__ == "__main__":
    sys.exit(main())
