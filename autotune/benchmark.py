"""``python -m autotune.benchmark``: the benchmark's command (``autotune.app.benchmark``)."""

from autotune.app.benchmark import main
from autotune.app.exit_codes import exit_now

if __name__ == "__main__":
    exit_now(main())
