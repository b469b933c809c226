"""bertjax.bench.checkpoint end to end on the tiny preset: it saves and restores with and
without fingerprints, prints what it measured and leaves nothing behind."""

import re
import subprocess
import sys

import pytest
from support import REPO

pytestmark = pytest.mark.integration


def test_the_checkpoint_benchmark_prints_both_kinds_and_removes_its_files(tmp_path):
    command = [sys.executable, "-m", "bertjax.bench.checkpoint", "--preset", "tiny"]
    result = subprocess.run(
        [*command, "--repeats", "1", "--dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"jax \S+, cpu; tiny: \d+ arrays, \d+\.\d\d GiB", lines[0]), lines
    for kind, line in zip(("save", "restore"), lines[1:3], strict=True):
        pattern = rf"{kind} +\d+\.\d\d s   verified +\d+\.\d\d s   [+-]\d+\.\d% \(medians of 1\)"
        assert re.fullmatch(pattern, line), line
    assert re.fullmatch(r"fingerprints alone \d+\.\d\d s", lines[3]), lines
    assert not list(tmp_path.iterdir())
