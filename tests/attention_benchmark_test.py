"""bertjax.attention_benchmark: its rows of timings, and bad flags in one line."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np

from bertjax import attention_benchmark

REPO = pathlib.Path(__file__).resolve().parent.parent


def run_tool(*flags):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "bertjax.attention_benchmark", *flags],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_packed_rows_hold_two_or_three_examples_then_padding():
    ids = attention_benchmark.packed_rows(16, 128)
    for row in ids:
        assert 2 <= len(set(row[row > 0].tolist())) <= 3
        assert row[-1] == 0  # padding at the end
        assert np.all(np.diff(row[row > 0]) >= 0)  # examples one after the other


def test_it_times_each_implementation_at_each_length():
    result = run_tool(
        "--preset=tiny",
        "--lengths=32,64",
        "--batch_sizes=2,1",
        "--implementations=xla",
        "--steps=1",
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("length")]
    assert len(rows) == 2
    assert re.match(r"length   32 batch   2 xla +[\d.]+ ms  temp +[\d,]+ MiB  1\.00x", rows[0])


def test_mismatched_flags_are_one_line():
    result = run_tool("--lengths=32,64", "--batch_sizes=2")
    assert result.returncode == 2
    assert "error: --batch_sizes has 1 values and --lengths 2" in result.stderr
    result = run_tool("--implementations=flash")
    assert result.returncode == 2
    assert "error: --implementations: 'flash' is not one of xla, cudnn, splash" in result.stderr
