"""``python -m autotune.benchmark``: the benchmark's command (``autotune.app.benchmark``)."""

import sys

from autotune.runtime import fork_server

if __name__ == "__main__":
    fork_server.start_for(sys.argv[1:])
    from autotune.app.benchmark import main
    from autotune.app.exit_codes import exit_now

    exit_now(main())
