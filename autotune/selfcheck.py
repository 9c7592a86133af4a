"""``python -m autotune.selfcheck``: the self-check's command (``autotune.app.selfcheck``)."""

from autotune.app.exit_codes import exit_now
from autotune.app.selfcheck import main

if __name__ == "__main__":
    exit_now(main())
