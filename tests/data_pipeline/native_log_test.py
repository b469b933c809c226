"""Start-up lines of TensorFlow, XLA and libtpu left out of a tool's stderr; the rest kept."""

import subprocess
import sys
import textwrap

import pytest
from support import REPO

from data_pipeline import native_log

# As TensorFlow 2.21, jaxlib and libtpu print them on a host without a GPU or a TPU.
NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795764442.467440     954 cudart_stub.cc:31] Could not find cuda drivers "
    "on your machine, GPU will not be used.",
    "E0000 00:00:1795764449.333235     954 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "Failed to find host bounds for accelerator type: WARNING: could not determine TPU "
    "accelerator type, please set env var `TPU_ACCELERATOR_TYPE` manually",
    "WARNING: Logging before InitGoogle() is written to STDERR",
    "W0000 00:00:1795811128.804415   32522 generator_dataset_op.cc:113] Error occurred when "
    "finalizing GeneratorDataset iterator: FAILED_PRECONDITION: Python interpreter state is "
    "not initialized. The process may be terminated.",
    "\t [[{{node PyFunc}}]]",
]
KEPT = [
    "error: /nonexistent/model_config.json: missing",
    "Traceback (most recent call last):",
    "E0000 00:00:1795764449.333235     954 some_op.cc:12] INTERNAL: a real failure",
    "stopped: SIGTERM at step 12: checkpoint 12 saved in 0.4 s",
]


@pytest.mark.parametrize("line", NOISE)
def test_start_up_lines_are_noise(line):
    assert native_log.is_noise(line)


@pytest.mark.parametrize("line", KEPT)
def test_errors_and_the_tools_own_lines_are_not(line):
    assert not native_log.is_noise(line)


PROGRAM = textwrap.dedent(
    """
    import os, sys
    from data_pipeline import cli

    def main(argv):
        # As C++ code writes: straight to descriptor 2, around the tool's own lines.
        os.write(2, ({noise!r} + "\\n").encode())
        print("progress 1/2", end="\\r", file=sys.stderr, flush=True)
        os.write(2, ({kept!r} + "\\n").encode())
        raise SystemExit("the last line")

    cli.run(main, lambda: None)
    """
)


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "-v"])
def test_a_tool_shows_its_own_lines_in_order_and_noise_only_with_v(tmp_path, verbose):
    program = PROGRAM.format(noise=NOISE[1], kept=KEPT[2])
    # stderr into a file, read as soon as the tool exits: what the next shell prompt follows.
    with open(tmp_path / "stderr", "w") as stderr:
        code = subprocess.call(
            [sys.executable, "-c", program, *(["-v", "0"] if verbose else [])],
            cwd=REPO,
            stderr=stderr,
            timeout=60,
        )
    written = (tmp_path / "stderr").read_bytes().decode()
    assert code == 1
    own = f"progress 1/2\r{KEPT[2]}\nthe last line\n"
    assert written == (f"{NOISE[1]}\n{own}" if verbose else own)


CONFIG_PROGRAM = textwrap.dedent(
    """
    import sys
    from absl import flags
    from ml_collections import config_flags
    from data_pipeline import cli

    def main(argv):
        print("x =", flags.FLAGS.config.x, file=sys.stderr)

    cli.run(main, lambda: config_flags.DEFINE_config_file("config", None, "The config."))
    """
)
# A config file that imports TensorFlow (as the fine-tuning configs do) writes its noise
# while the flags are parsed, before the tool's main starts.
CONFIG_FILE = textwrap.dedent(
    """
    import os
    import ml_collections

    os.write(2, ({noise!r} + "\\n").encode())

    def get_config():
        return ml_collections.ConfigDict({{"x": 1}})
    """
)


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "-v"])
def test_noise_while_the_flags_load_a_config_file_is_filtered_too(tmp_path, verbose):
    config = tmp_path / "config.py"
    config.write_text(CONFIG_FILE.format(noise=NOISE[0]))
    args = [f"--config={config}", "--config.x=2", *(["-v", "0"] if verbose else [])]
    result = subprocess.run(
        [sys.executable, "-c", CONFIG_PROGRAM, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == (f"{NOISE[0]}\nx = 2\n" if verbose else "x = 2\n")
