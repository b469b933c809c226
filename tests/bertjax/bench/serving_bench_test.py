"""bertjax.bench.serving: SavedModel latency, tokenizer included, against transformers."""

import json
import re
import subprocess
import sys

import pytest
from support import REPO


def run_tool(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "bertjax.bench.serving", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.command
def test_a_short_run_prints_a_row_per_batch_size(minilm_workdir, minilm_dir):
    result = run_tool(
        f"--workdir={minilm_workdir}", f"--st_dir={minilm_dir}", "--batch_sizes=1,4",
        "--seq_len=32", "--requests=3", "--warmup=1", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = re.findall(r"^ +(\d+) +[\d.]+ / [\d.]+ +[\d.]+ / [\d.]+ +([\d.]+)$", result.stdout, re.M)
    assert [size for size, _ in rows] == ["1", "4"], result.stdout
    report = json.loads(result.stdout.splitlines()[-1])
    # The same weights, tokens and pooling on both sides: the same vectors.
    assert report["max_vector_difference"] < 1e-4
    for row in report["rows"]:
        ours, theirs = row["savedmodel"], row["transformers"]
        assert 0 < ours["p50_s"] <= ours["p99_s"] and 0 < theirs["p50_s"] <= theirs["p99_s"]
        assert row["p50_ratio"] == pytest.approx(ours["p50_s"] / theirs["p50_s"])
    assert "Loading weights" not in result.stderr  # no progress bar


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch_sizes=1,x"], "--batch_sizes=1,x: whole numbers"),
        (["--batch_sizes=0"], "--batch_sizes=0: each at least 1"),
        (["--seq_len=2"], "--seq_len=2: at least 3"),
        (["--workdir=/nonexistent"], "--workdir=/nonexistent: not a bertjax workdir"),
    ],
)
def test_bad_flags_are_one_line_before_anything_loads(args, message):
    result = run_tool(*args, timeout=60)
    assert result.returncode == 2
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert message in error
