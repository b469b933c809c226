"""How a bertjax program starts: its flags answered first, then jax, with libtpu's settings.

A program (`python -m bertjax.main`, a tool) is a module whose docstring is its usage,
with `define_flags()`, that ends with

    if __name__ == "__main__":
        program.run("bertjax.tpu.compile_report:main", define_flags)

`run` is data_pipeline/cli.py's `run` (flags parsed and checked before the module doing
the work is imported, by name, and called with their values; user errors in one line;
TensorFlow's and XLA's start-up lines left out of stderr) that first sets libtpu's
environment and keeps one kind of native noise off stderr
(`drop_callbacks_into_closed_loops`), so that no program needs to. So `--help`, a bad flag or an unknown config key
answer in a fraction of a second (tests/data_pipeline/cli_test.py).
"""

import asyncio
import glob
import importlib.util
import os
import sys
from collections.abc import Callable

from data_pipeline import cli, native_log


def run(main: str | Callable, define_flags: Callable[[], None], *, positional_args: bool = False):
    libtpu_without_tpu()
    drop_callbacks_into_closed_loops()
    cli.run(main, define_flags, positional_args=positional_args)


def drop_callbacks_into_closed_loops() -> None:
    """Chains a `sys.unraisablehook` in front of the one there that drops one kind of
    unraisable exception, native code calling back into an asyncio event loop already
    closed, and passes every other on. Set by a program for its whole process, never by
    the library (a notebook's hooks are its own).

    When a disk fills during a checkpoint's save, one write fails and ends orbax's save
    (orbax 0.12.8 runs it with `loop.run_until_complete`, then closes the loop) while
    TensorStore's other writes are still in flight. As each finishes, TensorStore calls
    `call_soon_threadsafe` on the closed loop and Python prints the RuntimeError that
    raises: about 100 tracebacks around the one line that reports the failure
    (bertjax/checkpoint.py). Told by the code that raised it, never by its message.
    """
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if not into_closed_loop(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook


def into_closed_loop(unraisable) -> bool:
    """Whether the exception was raised by `call_soon_threadsafe` of a closed event loop,
    called from native code (the traceback starts there: no Python caller)."""
    tb = unraisable.exc_traceback
    if unraisable.object is not None or tb is None:
        return False
    frame = tb.tb_frame
    loop = frame.f_locals.get("self")
    return (
        frame.f_code is asyncio.BaseEventLoop.call_soon_threadsafe.__code__
        and isinstance(loop, asyncio.AbstractEventLoop)
        and loop.is_closed()
    )


def notebook() -> None:
    """What the first use of the bertjax API (`bertjax.restore`, `embed`, ...) sets up, as
    `run` does for a program: libtpu's settings, and TensorFlow's, XLA's and libtpu's
    start-up lines kept off stderr (native_log.py), in a script as in a Jupyter kernel.

    The lines stay where they are asked for: BERTJAX_VERBOSE=1, TF_CPP_MIN_LOG_LEVEL=0
    (every line of TensorFlow's), or a tool's -v (a package that calls this when imported,
    bertjax.sweep's, is imported by its tools before they read their flags). A process that
    imported jax itself before is left as it is: it set jax up as it chose, and may already
    run XLA's threads, under which the filter's fork is unsafe.
    """
    libtpu_without_tpu()
    wanted = (
        os.environ.get("BERTJAX_VERBOSE")
        or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0"
        or cli.asks_for_verbosity(sys.argv)
    )
    if wanted or "jax" in sys.modules:
        return
    native_log.filter_stderr()
    if sys.flags.interactive or hasattr(sys, "ps1"):  # at the interpreter's prompt
        native_log.python_lines_unfiltered()


def libtpu_without_tpu() -> None:
    """Settings for libtpu installed on a host with no TPU attached, where it only compiles
    (bertjax.tpu.aot); nothing where libtpu is not installed or a TPU is.

    libtpu still looks for the TPU VM's metadata whenever jax starts, and prints a
    page of warnings; these settings answer it. Its lock file, which keeps two
    processes off one TPU, would also keep two compiling processes apart. They
    must be set before jax starts its backends: `run` and `notebook` set them, and so
    does the test suite.
    """
    if importlib.util.find_spec("libtpu") is None:
        return
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")  # any name: compiling
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")  # names its own topology
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
