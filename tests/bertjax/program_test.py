"""What the bertjax API's first use sets up in the user's process (program.notebook)."""

import asyncio
import os
import pty
import select
import subprocess
import sys
import time
import types

import pytest
from support import REPO

# As TensorFlow prints it while it loads, and an error of its own that a user must see.
NOISE = (
    "I0000 00:00:1795764442.467440     954 cudart_stub.cc:31] Could not find cuda drivers "
    "on your machine, GPU will not be used."
)
REAL = "E0000 00:00:1795764449.333235     954 some_op.cc:12] INTERNAL: a real failure"

PROGRAM = f"""
import os, sys
{{before}}
from bertjax import program

program.notebook()
# As C++ code writes: straight to descriptor 2.
os.write(2, ({NOISE!r} + "\\n").encode())
os.write(2, ({REAL!r} + "\\n").encode())
"""


@pytest.mark.parametrize(
    "settings, before, shown",
    [
        ({}, "", False),
        ({"TF_CPP_MIN_LOG_LEVEL": "2"}, "", False),
        ({"BERTJAX_VERBOSE": "1"}, "", True),
        ({"TF_CPP_MIN_LOG_LEVEL": "0"}, "", True),
        ({}, "import jax", True),
        ({}, "sys.argv[1:] = ['--verbosity=1']", True),  # a tool's -v: a sweep's, say
    ],
    ids=[
        "default",
        "TF_CPP_MIN_LOG_LEVEL=2",
        "BERTJAX_VERBOSE=1",
        "TF_CPP_MIN_LOG_LEVEL=0",
        "jax",
        "-v",
    ],
)
def test_start_up_lines_are_kept_off_stderr_unless_asked_for(settings, before, shown):
    env = {
        k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "BERTJAX_VERBOSE")
    }
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(before=before)],
        cwd=REPO,
        env={**env, **settings},
        capture_output=True,  # descriptor 2 itself, as a terminal would get it
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == (f"{NOISE}\n{REAL}\n" if shown else f"{REAL}\n")


@pytest.mark.parametrize(
    "module", ["bertjax.sweep.report", "bertjax.suites.report", "bertjax.suites.glue.suite"]
)
def test_a_report_imported_by_a_notebook_writes_nothing_to_stderr(module):
    # What experiments/notebooks/sweep_report.ipynb and glue_report.ipynb import first:
    # the reports read workdirs, whose modules start TensorFlow and jax.
    unset = ("TF_CPP_MIN_LOG_LEVEL", "BERTJAX_VERBOSE")
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k not in unset},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_at_the_interpreters_prompt_python_writes_to_stderr_before_the_next_prompt():
    # `python` in a terminal: through the filter's reader, a process of its own, a traceback
    # could reach the terminal after the next prompt, and half a line would wait for its end.
    controller, terminal = pty.openpty()
    unset = ("TF_CPP_MIN_LOG_LEVEL", "BERTJAX_VERBOSE")
    python = subprocess.Popen(
        [sys.executable, "-q"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k not in unset},
    )
    os.close(terminal)
    typed = [
        "from bertjax import program; program.notebook()",
        # The noise in hexadecimal, so that the terminal's echo of the line does not show it.
        f"import os; n = os.write(2, bytes.fromhex({(NOISE + chr(10)).encode().hex()!r}))",
        "import sys; n = sys.stderr.write('half a line')",
        "1/0",
    ]
    try:
        shown = [until_prompt(controller)]
        for line in typed:
            os.write(controller, f"{line}\n".encode())
            shown.append(until_prompt(controller))
        os.write(controller, b"exit()\n")
        assert python.wait(timeout=30) == 0
    finally:
        python.kill()
        os.close(controller)
    assert shown[-2].endswith("\r\nhalf a line>>> "), shown
    assert shown[-1].endswith("\r\nZeroDivisionError: division by zero\r\n>>> "), shown
    assert NOISE not in "".join(shown)


def until_prompt(controller: int, timeout_s: float = 30.0) -> str:
    """What the terminal shows up to and with the interpreter's next prompt."""
    shown, deadline = b"", time.monotonic() + timeout_s
    while not shown.endswith(b">>> "):
        ready, _, _ = select.select([controller], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no prompt after {shown!r}"
        shown += os.read(controller, 4096)
    return shown.decode()


def native_callback_into(loop, callback=print) -> "UnraisableHookArgs":  # noqa: F821
    """What Python hands sys.unraisablehook when native code (TensorStore finishing a
    write) calls `loop.call_soon_threadsafe` and that raises: the traceback starts in
    that method."""
    try:
        loop.call_soon_threadsafe(callback)
    except (RuntimeError, TypeError) as error:
        raised = error
    return types.SimpleNamespace(
        exc_type=type(raised),
        exc_value=raised,
        exc_traceback=raised.__traceback__.tb_next,  # from the method on: no Python caller
        err_msg=None,
        object=None,
    )


def test_a_program_drops_callbacks_into_a_closed_event_loop_and_passes_on_the_rest(monkeypatch):
    # orbax closes its event loop on a failed write while TensorStore's other writes
    # are in flight; each calls back into it when it finishes.
    from bertjax import program

    told = []
    monkeypatch.setattr(sys, "unraisablehook", told.append)
    program.drop_callbacks_into_closed_loops()
    closed = asyncio.new_event_loop()
    closed.close()
    sys.unraisablehook(native_callback_into(closed))
    assert told == []
    # Passed on: the same method raising on a loop still open (a debug loop given no
    # callable), and any other.
    open_loop = asyncio.new_event_loop()
    open_loop.set_debug(True)
    not_callable = native_callback_into(open_loop, callback=None)
    other = types.SimpleNamespace(
        exc_type=RuntimeError, exc_value=RuntimeError("x"), exc_traceback=None, object=None
    )
    sys.unraisablehook(not_callable)
    sys.unraisablehook(other)
    assert told == [not_callable, other]
    open_loop.close()
