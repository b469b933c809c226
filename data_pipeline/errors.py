"""The one base class of every error a user can cause and fix.

A bad option, a missing or malformed file, a workdir that does not fit the
run: each raises a subclass of `UserError` whose message names the option,
file or row. Command-line tools catch `UserError` in one place
(`data_pipeline.cli.run`) and print it as one line; anything else is a bug
and keeps its traceback. This module imports nothing: it is the lowest of
data_pipeline's, so that any layer raises and derives its own errors from it
(bertjax's model and sharding do) without importing the pipeline.
"""


class UserError(ValueError):
    """Bad input or an inconsistent config: the message says what to change.

    Command-line tools print the message and exit with `EXIT_CODE`.
    """

    EXIT_CODE = 2  # as argparse, and the shell for a builtin, exit on a usage error


class ConfigError(UserError):
    """An unknown key, or an inconsistent or out-of-range option; the message names it."""


class Preempted(Exception):
    """A run stopped on request (a signal or a preemption notice) after saving its step.

    Not an error: running the same command again resumes. Command-line tools
    print the message and exit with `EXIT_CODE`.
    """

    EXIT_CODE = 75  # EX_TEMPFAIL of sysexits.h: a temporary failure, try again


class Interrupted(KeyboardInterrupt):
    """Ctrl-C that ended a command without the save a first Ctrl-C waits for (a second
    one, or one before the command listened for it); the message says what was kept.

    Command-line tools print the message and exit with `EXIT_CODE`, as for any Ctrl-C.
    """

    EXIT_CODE = 130  # 128 + SIGINT: what a shell reports for a command that Ctrl-C ended
