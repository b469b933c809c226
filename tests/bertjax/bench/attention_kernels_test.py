"""bertjax.bench.attention_kernels: its rows of timings, and bad flags in one line."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from support import REPO

from bertjax.bench import attention_kernels

pytestmark = pytest.mark.integration

# BERT-Tiny, one implementation, one timed step: the rows' shape, not their numbers.
TINY = ("--preset=tiny", "--implementations=xla", "--steps=1")


def run_tool(*flags):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "bertjax.bench.attention_kernels", *flags],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_packed_rows_hold_two_or_three_examples_then_padding():
    ids = attention_kernels.packed_rows(16, 128)
    for row in ids:
        assert 2 <= len(set(row[row > 0].tolist())) <= 3
        assert row[-1] == 0  # padding at the end
        assert np.all(np.diff(row[row > 0]) >= 0)  # examples one after the other


def test_pretraining_positions_are_tokens_and_example_starts():
    ids = attention_kernels.packed_rows(16, 128)
    masked, cls = attention_kernels.pretraining_positions(ids, 20)
    assert masked.shape == (16, 20) and cls.shape == (16, 3)
    for row, at, starts in zip(ids, masked, cls, strict=True):
        assert np.all(row[at] > 0)
        assert starts[0] == 0
        assert all(row[s] > 0 and (s == 0 or row[s - 1] != row[s]) for s in starts)


def test_it_times_pretraining_with_and_without_the_trimmed_last_layer():
    result = run_tool(
        *TINY, "--lengths=32", "--batch_sizes=2", "--trim_last_layer=true,false", "--predictions=4"
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("length")]
    assert [re.search(r"trim=(\w+)", row).group(1) for row in rows] == ["True", "False"]


def test_it_times_each_implementation_at_each_length():
    result = run_tool(*TINY, "--lengths=32,64", "--batch_sizes=2,1")
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
    result = run_tool("--trim_last_layer=yes")
    assert result.returncode == 2
    assert "error: --trim_last_layer: 'yes' is neither true nor false" in result.stderr
