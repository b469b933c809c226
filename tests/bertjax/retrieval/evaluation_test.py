"""`python -m bertjax.retrieval` as a user meets its errors: one line naming the flag given
(--data_dir, --split), not the config option a fine-tuning run sets, or the workdir of
the wrong kind."""

import json
import os
import subprocess
import sys

import pytest
from support import REPO
from support.beir_files import write_beir

pytestmark = pytest.mark.integration


def evaluate(tmp_path, *flags):
    return subprocess.run(
        [sys.executable, "-m", "bertjax.retrieval", "evaluate", f"--workdir={tmp_path / 'w'}",
         f"--out={tmp_path / 'out'}", *flags],
        cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def test_a_missing_collection_or_split_names_the_flag(tmp_path):
    beir = write_beir(tmp_path / "beir")
    for flags, said in (
        (
            (f"--data_dir={tmp_path / 'nope'}",),
            f"{tmp_path}/nope/corpus.jsonl (--data_dir): cannot read: No such file or directory",
        ),
        (
            (f"--data_dir={beir}", "--split=tset"),
            f"{beir}/qrels/tset.tsv (--split): cannot read: No such file or directory",
        ),
        ((f"--data_dir={beir}", "--split="), "evaluate needs --split"),
    ):
        result = evaluate(tmp_path, *flags)
        assert result.returncode == 2, result.stderr[-3000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert errors == [f"error: {said}"]
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "out").exists()


def test_a_reranker_given_for_an_embedder_is_one_line_before_anything_loads(tmp_path):
    beir = write_beir(tmp_path / "beir")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "task.json").write_text(json.dumps({"kind": "reranking"}))
    result = subprocess.run(
        [sys.executable, "-m", "bertjax.retrieval", "mine", f"--workdir={tmp_path / 'w'}",
         f"--data_dir={beir}", "--split=train", f"--out={tmp_path / 'n.jsonl'}"],
        cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: --workdir={tmp_path / 'w'}: a reranking workdir scores pairs; this takes an "
        "embedder (any other workdir)"
    ]
    assert not (tmp_path / "n.jsonl").exists()
