"""bertjax.bench.reranking: reranker training and scoring pairs/s against sentence-transformers'
CrossEncoder."""

import json
import re
import subprocess
import sys
import types

import pytest
from support import REPO

from bertjax.bench import reranking
from data_pipeline.errors import UserError


@pytest.mark.command
def test_a_short_run_prints_a_row_per_framework(command_pretrained, tmp_path):
    # The command tier's small model both ways (MiniLM's import and compile cost a minute
    # more): its workdir, and the same model exported for sentence-transformers.
    from bertjax.convert import import_export

    workdir = command_pretrained["workdir"]
    import_export.export_sentence_transformers(workdir, str(tmp_path / "st"))
    result = subprocess.run(
        [sys.executable, "-m", "bertjax.bench.reranking", f"--workdir={workdir}",
         f"--st_dir={tmp_path / 'st'}", "--groups=2", "--num_negatives=1", "--length=16",
         "--warmup=1", "--steps=1", "--score_pairs=4", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = re.findall(
        r"^(bertjax|sentence-transformers) +([\d.]+) +[\d.]+ +([\d.]+)$", result.stdout, re.M
    )
    assert [name for name, *_ in rows] == ["bertjax", "sentence-transformers"], result.stdout
    assert all(float(train) > 0 and float(score) > 0 for _, train, score in rows)
    assert re.search(
        r"^training +2 groups of 2 pairs \(4 pairs\) a step, 16 tokens", result.stdout, re.M
    )
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["training_speedup"] == pytest.approx(
        report["bertjax"]["pairs_per_s"] / report["sentence_transformers"]["pairs_per_s"]
    )
    assert "Loading weights" not in result.stderr and "Converting" not in result.stderr


def flags_of(**values):
    defaults = dict(workdir=None, st_dir=None, groups=8, num_negatives=3, length=128, warmup=3,
                    steps=10, score_pairs=512, framework="bertjax")  # fmt: skip
    return types.SimpleNamespace(**{**defaults, **values})


@pytest.mark.parametrize(
    "values,message",
    [
        ({"groups": 0}, "--groups=0: at least 1"),
        ({"length": 4}, "--length=4: at least 8"),
        ({"warmup": 0}, "--warmup=0: at least 1"),
        ({"workdir": "/nonexistent"}, "--workdir=/nonexistent: no model_config.json there"),
    ],
)
def test_bad_input_is_one_line(values, message):
    with pytest.raises(UserError, match=re.escape(message)):
        reranking.check_args(flags_of(**values))


def test_each_group_is_a_query_its_passage_and_the_next_groups_passages():
    groups = reranking.groups(flags_of(groups=3, num_negatives=2, length=32))
    assert [len(passages) for _, passages in groups] == [3, 3, 3]
    assert groups[0][1][1] == groups[1][1][0] and groups[1][1][2] == groups[3 - 1][1][1]
    assert all(len(passage.split()) >= 32 for _, passages in groups for passage in passages)
