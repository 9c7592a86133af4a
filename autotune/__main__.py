"""``python -m autotune [overrides]``."""

import sys

from autotune.runtime import fork_server

if __name__ == "__main__":
    fork_server.start_for(sys.argv[1:], no_trials=("mode=report",))
    from autotune.app.cli import main
    from autotune.app.exit_codes import exit_now

    exit_now(main())
