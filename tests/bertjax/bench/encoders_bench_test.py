"""bertjax.bench.encoders: BERT-Tiny and the tiny modern encoder at equal training FLOPs."""

import re
import subprocess
import sys

import pytest
from support import REPO

from bertjax.bench import encoders

pytestmark = pytest.mark.integration


def test_every_model_gets_bert_tinys_flops():
    loaded = encoders.configs(3000)
    assert loaded["bert_tiny"].num_train_steps == 3000
    budget = encoders.step_flops(loaded["bert_tiny"]) * 3000
    for name, config in loaded.items():
        per_step = encoders.step_flops(config)
        assert abs(per_step * config.num_train_steps - budget) <= per_step / 2, name
    # The ablation is BERT-Tiny's block under the modern recipe.
    mlm, modern = loaded["bert_block_mlm"], loaded["modern_tiny"]
    assert mlm.model.to_dict() == {**loaded["bert_tiny"].model.to_dict(), "vocab_size": 4096}
    assert mlm.data.to_dict() == modern.data.to_dict()
    assert mlm.optimizer.name == "stable_adamw" and not mlm.data.next_sentence_prediction
    # The modern recipe's warmup and decay follow its steps.
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
    # Which model trains, its steps, and after the first the time left.
    starts = re.findall(
        r"^model (\d) of 3: (\w+), \d+ steps in [^;\s]+(; about [\d:]+ left)?", result.stdout, re.M
    )
    assert [(n, name, bool(left)) for n, name, left in starts] == [
        ("1", "bert_tiny", False),
        ("2", "bert_block_mlm", True),
        ("3", "modern_tiny", True),
    ], result.stdout
    rows = {
        m["model"]: m
        for m in re.finditer(
            r"^(?P<model>\w+)\s+[\d,]+\s+[\d.]+\s+(?P<steps>\d+)\s.*\s(?P<acc>0\.\d+)$",
            result.stdout,
            re.M,
        )
    }
    assert set(rows) == {"bert_tiny", "bert_block_mlm", "modern_tiny"}
    assert int(rows["bert_tiny"]["steps"]) == 12
    assert 0 < int(rows["modern_tiny"]["steps"]) < int(rows["bert_block_mlm"]["steps"]) < 12
