"""The start-up lines of TensorFlow, XLA and libtpu, kept off a tool's stderr.

Their C++ code writes to file descriptor 2 directly, and before absl's logging
is set up, so neither TF_CPP_MIN_LOG_LEVEL nor Python's logging reaches them:
"All log messages before absl::InitializeLog() ...", "Could not find cuda
drivers", "failed call to cuInit", libtpu's search for a TPU on a host without
one. None of them says anything a user can act on.

`filter_stderr()` (data_pipeline/cli.py calls it for every tool unless
`-v`/`--verbosity` is given, bertjax/program.py's `notebook` at the first use of
the bertjax API) puts a pipe in place of descriptor 2 and forks a
reader that copies every line to the real stderr except those that match
`NOISE`. The reader is a process, not a thread, so the last lines of a tool
that crashes or is killed still arrive: it ends when every writer (the tool and
any process it started) has closed the pipe. It ignores SIGINT and SIGTERM,
which a terminal or a process group sends to it too, for the same reason.
"""

import atexit
import os
import re
import signal
import sys
import time

NOISE = re.compile(
    "|".join(
        (
            r"^WARNING: All log messages before absl::InitializeLog\(\) is called",
            r"^WARNING: Logging before InitGoogle\(\) is written to STDERR",
            r"\] Could not find cuda drivers on your machine",
            r"\] failed call to cuInit",
            r"^Failed to find host bounds for accelerator type",
            r"\] INVALID_ARGUMENT: Error: unexpected worker hostname 'WARNING: could not",
            r"^=== Source Location Trace: ===",
            r"^learning/\S+/libtpu_init_utils\.cc:\d+$",
            r"\] oneDNN custom operations are on",
            # An int64 op of tf.data's on a CPU without AVX-512: Eigen runs it instead.
            r"\] oneDNN supports DT_INT64 only on platforms with AVX-512",
            r"\] Unable to register cu(DNN|FFT|BLAS) factory",
            r"\] TF-TRT Warning: Could not find TensorRT",
            r"\] This TensorFlow binary is optimized to use available CPU instructions",
            r"^To enable the following instructions: .* rebuild TensorFlow",
            # At exit after SIGTERM: a tf.data iterator finalized after the interpreter.
            r"\] Error occurred when finalizing GeneratorDataset iterator: FAILED_PRECONDITION: "
            r"Python interpreter state is not initialized",
            r"^\t \[\[\{\{node PyFunc\}\}\]\]$",
        )
    )
)


def is_noise(line: str) -> bool:
    return NOISE.search(line) is not None


_reader: tuple[int, int] | None = None  # (the reader's pid, the real stderr's descriptor)


def filter_stderr() -> None:
    """From now on, lines written to descriptor 2 by this process and the processes it
    starts reach the real stderr unless they are start-up noise (`NOISE`). At exit (or
    `drain()`) the real stderr is put back once the reader has copied everything."""
    global _reader
    if _reader is not None:
        return
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the reader
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.close(write_end)
        _copy(read_end, 2)
        os._exit(0)
    os.close(read_end)
    _reader = (pid, os.dup(2))
    os.dup2(write_end, 2)
    os.close(write_end)
    atexit.register(drain)


def python_lines_unfiltered() -> None:
    """Points sys.stderr past the filter, straight at the real stderr: Python's own lines
    (tracebacks, warnings) arrive at once, as an interactive interpreter needs, whose
    traceback through the reader could come after its next prompt. What native code
    writes to descriptor 2 is still filtered. Nothing without a filter, or where sys.stderr
    is not the process's own (a Jupyter kernel's)."""
    if _reader is None or sys.stderr is not sys.__stderr__:
        return
    sys.stderr.flush()
    real = os.dup(_reader[1])
    sys.stderr = os.fdopen(
        real, "w", buffering=1, encoding=sys.stderr.encoding, errors="backslashreplace"
    )


def drain(timeout_s: float = 5.0) -> None:
    """Puts the real stderr back and waits (up to `timeout_s`: a process this one started
    may still hold the pipe) for the reader to copy what was written, so that it comes
    before whatever the shell prints next."""
    global _reader
    if _reader is None:
        return
    pid, real_stderr = _reader
    _reader = None
    sys.stderr.flush()
    os.dup2(real_stderr, 2)
    os.close(real_stderr)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return
        time.sleep(0.005)


def _copy(source: int, target: int) -> None:
    """Copies `source` to `target` a line at a time, leaving out noise. A line ends at a
    newline or a carriage return (a progress bar redraws its line), each kept."""
    pending = b""
    while chunk := os.read(source, 65536):
        *lines, pending = _LINE_END.split(pending + chunk)
        kept = b"".join(line for line in lines if not _noise(line))
        if kept:
            _write(target, kept)
    if pending and not _noise(pending):
        _write(target, pending)


_LINE_END = re.compile(rb"(?<=[\r\n])")


def _noise(line: bytes) -> bool:
    return is_noise(line.decode("utf-8", "replace").rstrip("\r\n"))


def _write(target: int, data: bytes) -> None:
    while data:
        data = data[os.write(target, data) :]
