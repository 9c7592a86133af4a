"""``python -m autotune.slow_storage``: a folder behind storage that makes reads wait
(``autotune.app.slow_storage``)."""

from autotune.app.exit_codes import exit_now
from autotune.app.slow_storage import main

if __name__ == "__main__":
    exit_now(main())
