"""bertjax.bench.encoders: BERT-Tiny and the tiny modern encoder at equal training FLOPs."""

import re
import subprocess
import sys

import pytest
from support import REPO

from bertjax.bench import encoders

pytestmark = pytest.mark.integration


def test_the_modern_model_gets_bert_tinys_flops():
    loaded = encoders.configs(3000)
    bert, modern = loaded["bert_tiny"], loaded["modern_tiny"]
    flops = {name: encoders.step_flops(config) for name, config in loaded.items()}
    assert flops["modern_tiny"] > flops["bert_tiny"]  # twice the layers, three FFN matrices
    bert_total = flops["bert_tiny"] * bert.num_train_steps
    modern_total = flops["modern_tiny"] * modern.num_train_steps
    assert abs(modern_total - bert_total) <= flops["modern_tiny"] / 2  # to within a step
    assert modern.optimizer.decay_steps == modern.num_train_steps // 5


def test_a_short_comparison_prints_a_row_per_model(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertjax.bench.encoders",
            "--workdir",
            str(tmp_path),
            "--bert_steps",
            "12",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNING" not in result.stdout  # both learned the same vocabulary
    rows = {
        m["model"]: m
        for m in re.finditer(
            r"^(?P<model>\w+)\s+[\d,]+\s+[\d.]+\s+(?P<steps>\d+)\s.*\s(?P<acc>0\.\d+)$",
            result.stdout,
            re.M,
        )
    }
    assert set(rows) == {"bert_tiny", "modern_tiny"}
    assert int(rows["bert_tiny"]["steps"]) == 12
    assert 0 < int(rows["modern_tiny"]["steps"]) < 12
