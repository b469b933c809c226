"""bertjax.bench.embedding: contrastive fine-tuning pairs/s against sentence-transformers."""

import json
import pathlib
import re
import subprocess
import sys

import pytest
from support import REPO

from bertjax.bench import embedding


def run_tool(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "bertjax.bench.embedding", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.command
def test_a_short_run_prints_a_row_per_framework(command_pretrained, tmp_path):
    # The command tier's small model both ways (MiniLM's compile costs half a minute
    # more): its workdir, and the same model exported for sentence-transformers.
    from bertjax.convert import import_export

    workdir = command_pretrained["workdir"]
    import_export.export_sentence_transformers(workdir, str(tmp_path / "st"))
    result = run_tool(
        f"--workdir={workdir}",
        f"--st_dir={tmp_path / 'st'}",
        "--batch_size=4",
        "--query_length=8",
        "--passage_length=16",
        "--warmup=1",
        "--steps=1",
        "--json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = re.findall(
        r"^(bertjax|sentence-transformers) +([\d.]+) +([\d.]+) +[\d.]+$", result.stdout, re.M
    )
    assert [name for name, *_ in rows] == ["bertjax", "sentence-transformers"], result.stdout
    assert all(float(pairs) > 0 for _, pairs, _ in rows)
    assert re.search(r"^batch +4 pairs: queries 8 tokens, passages 16 tokens", result.stdout, re.M)
    assert re.search(
        r"^versions .*jax [\d.]+.*torch .*sentence-transformers [\d.]+", result.stdout, re.M
    )
    assert re.search(r"^bertjax / sentence-transformers +[\d.]+x pairs/s$", result.stdout, re.M)
    report = json.loads(result.stdout.splitlines()[-1])
    layers = json.loads((pathlib.Path(workdir) / "model_config.json").read_text())
    assert report["bertjax"]["model"]["layers"] == layers["num_hidden_layers"]
    assert report["speedup"] == pytest.approx(
        report["bertjax"]["pairs_per_s"] / report["sentence_transformers"]["pairs_per_s"]
    )
    # Loading a model prints no progress bar.
    assert "Loading weights" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--batch_size=1"],
            "error: --batch_size=1: a batch of one pair has no in-batch negatives",
        ),
        (["--workdir=/nonexistent"], "error: --workdir=/nonexistent: not a bertjax workdir"),
        (["--st_dir=/nonexistent"], "error: --st_dir=/nonexistent: not a sentence-transformers"),
        (["--steps=0"], "error: --steps=0: at least 1"),
    ],
)
def test_bad_input_is_one_line(args, message):
    result = run_tool(*args, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [result.stderr.splitlines()[0]]
    assert result.stderr.startswith(message), result.stderr


def test_the_pairs_fill_both_lengths():
    pairs = embedding.corpus_pairs(32, 128)
    assert len(pairs) >= 32
    for query, passage in pairs[:100]:
        assert len(query.split()) >= 32 and len(passage.split()) >= 128
