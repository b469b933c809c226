"""The command-line convention every bertjax tool follows.

A tool module defines `define_flags()` and `main(argv)`, and ends with

    if __name__ == "__main__":
        cli.run(main, define_flags)

so its flags exist only when it runs as a program: any set of tool modules
imports into one process (a test, a notebook) without clashing flag names.
`run` is also the one place where user errors are caught: a `UserError` is
printed as one line, `error: ...`, on stderr and the exit status is 2.
"""

import sys
from collections.abc import Callable

from absl import app, logging

from data_pipeline.errors import UserError


def run(main: Callable[[list[str]], int | None], define_flags: Callable[[], None]) -> None:
    """Defines the flags, parses them and runs `main`, reporting user errors in one line."""
    define_flags()
    app.run(lambda argv: _guarded(main, argv))


def _guarded(main, argv: list[str]) -> int | None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.WARNING)
    try:
        return main(argv)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
