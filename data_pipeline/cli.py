"""The command-line convention every bertjax tool follows.

A program is a module whose docstring is its usage, with `define_flags()`, that ends with

    if __name__ == "__main__":
        cli.run("data_pipeline.vocab_learning:main", define_flags)

`run` defines the flags, parses and checks them with nothing heavier than absl and
ml_collections imported, and only then imports the module that does the work, by name,
and calls its function with the flags' values (`args.output`; `args.argv` holds the
arguments that are not flags, with `positional_args`). So `--help`, a bad flag or an
unknown config key answer before TensorFlow or JAX is imported, and the module doing the
work imports what it needs at its top and never reads `FLAGS`. A program whose work needs
nothing heavy keeps `main(argv)` beside its flags and passes it: `cli.run(main, define_flags)`.
Flags exist only while a program runs: any set of programs imports into one process (a
test, a notebook) without clashing flag names.

`--help` prints the usage and exits with 0. `run` is also the one place where
user errors are caught: a bad flag (unknown, missing, or of the wrong type), a
usage error, a `UserError`, an `OSError` (a file that cannot be read or
written) or TensorFlow's equivalent is printed as one line, `error: ...`, on
stderr and the exit status is 2 (`UserError.EXIT_CODE`). So is an unknown key
in a `--config.KEY=VALUE` override, at any depth, with the closest known key,
and a `UserError` raised while a config file loads (its `get_config` rejecting
the argument after the colon, as in `glue.py:nosuch`); ml_collections and absl
would print a long traceback instead. A run stopped on request (`Preempted`, after saving) prints
`stopped: ...` and exits with 75 (`Preempted.EXIT_CODE`); a Ctrl-C that ends a command
(a KeyboardInterrupt, `Interrupted` where the command says what it kept) prints
`interrupted: ...` and exits with 130 (`Interrupted.EXIT_CODE`). The start-up lines of
TensorFlow, XLA and libtpu are left out of stderr (native_log.py) unless
`-v`/`--verbosity` is given.
"""

import gc
import importlib
import os
import re
import sys
import traceback
import types
from collections.abc import Callable

import ml_collections
from absl import app, flags, logging
from ml_collections.config_flags.config_flags import is_config_flag

from data_pipeline import config as config_lib
from data_pipeline import native_log
from data_pipeline.errors import Interrupted, Preempted, UserError


def run(
    main: str | Callable[[list[str]], int | None],
    define_flags: Callable[[], None],
    *,
    positional_args: bool = False,
) -> None:
    """Defines the flags, parses them and runs the work, reporting user errors in one line.

    `main` is "module:function", imported once the flags are parsed and called with
    their values (`args.NAME`, and `args.argv` with `positional_args`), or a function
    of the program's own module called with argv. argv holds the program name and,
    only with `positional_args`, the arguments that are not flags; otherwise any
    such argument is a usage error.
    """
    before = _flag_names()
    define_flags()
    names = _flag_names() - before
    if isinstance(main, str):
        main = _work(main, names, positional_args)
    app.run(lambda argv: _guarded(main, argv, positional_args), flags_parser=_parse_flags)


def _flag_names() -> set[str]:
    return {flags.FLAGS[name].name for name in flags.FLAGS}


def _work(target: str, names: set[str], positional_args: bool) -> Callable:
    """argv -> the call of `target` ("module:function") with the values of the flags `names`."""
    module, function = target.split(":")

    def main(argv: list[str]):
        args = types.SimpleNamespace(**{name: flags.FLAGS[name].value for name in sorted(names)})
        if positional_args:
            args.argv = argv[1:]
        return getattr(importlib.import_module(module), function)(args)

    return main


def check_config_overrides(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Raises ConfigError for the first `--config.A.B=...` in `argv` that names no key.

    Each config flag's file is loaded as its flag loads it. A path into a
    value names the value; one into a dataclass or a list is left to ml_collections.
    """
    argv = flag_values.read_flags_from_files(argv, force_gnu=False)
    for name in list(flag_values):
        flag = flag_values[name]
        if not is_config_flag(flag):
            continue
        value = _flag_argument(argv, name)
        config = flag.value if value is None else flag.parser.parse(value)
        if not isinstance(config, ml_collections.ConfigDict):
            continue  # not given, or a file that failed to load: its own error says why
        override = re.compile(rf"^--?(?:no)?{re.escape(name)}\.([^=]+)")
        for arg in argv[1:]:
            if match := override.match(arg):
                _check_path(config, match.group(1), name)


def _flag_argument(argv: list[str], name: str) -> str | None:
    """The last value given to --name in `argv` (`--name=V` or `--name V`)."""
    value = None
    for i, arg in enumerate(argv[1:], 1):
        if arg == "--":
            break
        flag, equals, given = arg.lstrip("-").partition("=")
        if arg.startswith("-") and flag == name:
            value = given if equals else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


def _check_path(config: ml_collections.ConfigDict, path: str, name: str) -> None:
    node, prefix = config, name
    elsewhere = config_lib.key_paths(config, name)
    for key in path.split("."):
        if node is None or isinstance(node, bool | int | float | str):
            raise config_lib.ConfigError(
                f"unknown config key: {prefix}.{key}; {prefix} is a value, not a group of keys"
            )
        if not isinstance(node, ml_collections.ConfigDict):
            return
        key, index = key.split("[", 1)[0], "[" in key
        config_lib.check_known_keys([key], node.keys(), prefix, elsewhere=elsewhere)
        if index:  # `layers[0]`: ml_collections checks the rest
            return
        node, prefix = node[key], f"{prefix}.{key}"


# absl's help flags, which print the usage and exit with status 1; here they exit with 0.
_HELP = {"help": True, "?": True, "helpshort": True, "helpfull": False}


def _parse_flags(argv: list[str]) -> list[str]:
    for arg in argv[1 : argv.index("--") if "--" in argv else None]:
        name = arg.lstrip("-")
        if arg.startswith("-") and name in _HELP:
            app.usage(shorthelp=_HELP[name], writeto_stdout=True, exitcode=0)
    # Before the flags load the config files, which may import TensorFlow.
    if not asks_for_verbosity(argv):
        native_log.filter_stderr()
    _check_config_files(argv)
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        # A config file's get_config raising a UserError: ml_collections re-raises it
        # with its traceback in the message and absl wraps that in a flags error.
        user_error = _user_error_cause(error)
        if user_error is not None:
            _fail(str(user_error))
        _flags_error(error)
    except Exception:
        # An unknown override key ends in ml_collections' AttributeError; name it instead.
        try:
            check_config_overrides(argv)
        except config_lib.ConfigError as error:
            _fail(str(error))
        raise


def asks_for_verbosity(argv: list[str]) -> bool:
    """Whether `argv` sets absl's -v/--verbosity, which brings the start-up lines back."""
    argv = flags.FLAGS.read_flags_from_files(argv, force_gnu=False)
    end = argv.index("--") if "--" in argv else None
    names = {"v", "verbosity"}
    return any(a.startswith("-") and a.lstrip("-").split("=")[0] in names for a in argv[1:end])


def _user_error_cause(error: BaseException) -> UserError | None:
    """The innermost UserError among `error`'s causes and contexts: the one first raised."""
    found, seen = None, set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, UserError):
            found = error
        error = error.__cause__ or error.__context__
    return found


def _flags_error(error: flags.Error):
    """Any other bad flag (a missing required flag, a value of the wrong type), in one line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    _fail(f"{' '.join(lines)} (--help lists the flags)")


def _check_config_files(argv: list[str]) -> None:
    """A missing config file in one line; ml_collections reports it, in five, on first use."""
    argv = flags.FLAGS.read_flags_from_files(argv, force_gnu=False)
    for name in list(flags.FLAGS):
        value = _flag_argument(argv, name) if is_config_flag(flags.FLAGS[name]) else None
        if value is not None and not os.path.isfile(value.split(":", 1)[0]):
            _fail(f"--{name}={value}: no such file")


def _guarded(main, argv: list[str], positional_args: bool) -> int | None:
    if not flags.FLAGS["verbosity"].present:  # -v N brings absl's INFO lines back
        logging.set_verbosity(logging.WARNING)
    try:
        if len(argv) > 1 and not positional_args:
            raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
        return main(argv)
    except app.UsageError as error:
        _fail(str(error))
    except Preempted as stopped:
        _print_stopped(stopped)
        _release(stopped)
        sys.exit(Preempted.EXIT_CODE)
    except KeyboardInterrupt as interrupted:
        _print_interrupted(interrupted)
        _release(interrupted)
        sys.exit(Interrupted.EXIT_CODE)
    except Exception as error:
        message = _user_message(error)
        if message is None:
            raise
        _release(error)
        _fail(message)


def _release(error: BaseException) -> None:
    """Lets go of what the finished frames of `error`, and of the errors it chains, still
    hold, so that the program's objects are finalized before the interpreter is: a
    tf.data iterator finalized after it prints two lines of TensorFlow's below the
    error line."""
    pending, seen = [error], set()
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        pending += [error.__cause__, error.__context__]
    gc.collect()


def exit_preempted(stopped: Preempted) -> None:
    """Ends the process now, as _guarded does for a raised Preempted, without unwinding
    (from a signal handler that must not raise: bertjax/preemption.py)."""
    _print_stopped(stopped)
    _exit_now(Preempted.EXIT_CODE)


def _print_stopped(stopped: Preempted) -> None:
    print(f"stopped: {stopped}", file=sys.stderr)


def exit_interrupted(interrupted: Interrupted) -> None:
    """Ends the process now, as _guarded does for a Ctrl-C, without unwinding (from a
    signal handler: bertjax/preemption.py)."""
    _print_interrupted(interrupted)
    _exit_now(Interrupted.EXIT_CODE)


def _exit_now(code: int) -> None:
    """Exits with `code` once what was printed has reached the terminal."""
    sys.stdout.flush()
    native_log.drain()
    os._exit(code)


def _print_interrupted(interrupted: KeyboardInterrupt) -> None:
    print(f"interrupted: {str(interrupted) or 'Ctrl-C'}", file=sys.stderr)


def _user_message(error: Exception) -> str | None:
    """The one line to print for an error the user can fix; None for a bug."""
    if isinstance(error, UserError | OSError):
        return str(error)
    # TensorFlow's file errors; not imported here, so a tool without TensorFlow starts fast.
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    file_errors = (
        tf.errors.NotFoundError,
        tf.errors.PermissionDeniedError,
        tf.errors.AlreadyExistsError,
        tf.errors.ResourceExhaustedError,  # a full disk, or a batch too large for memory
    )
    return error.message if isinstance(error, file_errors) else None


def _fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(UserError.EXIT_CODE)
