"""Entry points: ``python -m autotune`` (cli) and ``python -m autotune.benchmark``. The only code
that parses arguments and maps errors to exit codes; nothing in the package imports it."""
