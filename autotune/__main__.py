"""``python -m autotune [overrides]``."""

from autotune.app.cli import main
from autotune.app.exit_codes import exit_now

if __name__ == "__main__":
    exit_now(main())
