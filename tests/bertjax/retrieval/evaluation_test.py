"""`python -m bertjax.retrieval` as a user meets its errors: one line naming the flag given
(--data_dir, --split), not the config option a fine-tuning run sets, or the workdir of
the wrong kind."""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import scipy.stats
from support import REPO
from support.beir_files import write_beir
from support.finetuned import finetuned_workdir

from bertjax import retrieval_metrics
from bertjax.retrieval import evaluation
from data_pipeline.errors import UserError
from data_pipeline.finetune import retrieval_input


def evaluate(tmp_path, *flags):
    return subprocess.run(
        [sys.executable, "-m", "bertjax.retrieval", "evaluate", f"--workdir={tmp_path / 'w'}",
         f"--out={tmp_path / 'out'}", *flags],
        cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.parametrize(
    "lines,depth,message",
    [
        ("q30 Q0 d30 1 0.9 x\nq30 Q0 d1 2\n", 1, r"run.trec:2: 4 fields, not 6"),
        (
            "q30 Q0 d30 1 0.9 x\nq30 Q0 d1 2 0.5 x\n",
            3,
            r"--rerank_depth=3: above the first stage's depth, 2",
        ),
        ("q30 Q0 nope 1 0.9 x\n", 1, r"passage 'nope' of query 'q30' is not in the corpus"),
        ("q99 Q0 d1 1 0.9 x\n", 1, r"query 'q99' is not in the split's queries"),
        ("", 1, r"run.trec: no lines"),
    ],
)
def test_a_bad_first_stage_run_file_is_one_line(tmp_path, lines, depth, message):
    collection = retrieval_input.load_collection(str(write_beir(tmp_path / "beir")), "dev")
    (tmp_path / "run.trec").write_text(lines)
    with pytest.raises(UserError, match=message):
        evaluation.read_first_stage(str(tmp_path / "run.trec"), collection, depth)


def test_rerank_options_are_checked_before_anything_loads(tmp_path):
    (tmp_path / "embedder").mkdir()
    (tmp_path / "embedder" / "task.json").write_text(json.dumps({"kind": "retrieval"}))
    for options, message in (
        ({"first_stage": "run.trec"}, "--first_stage=run.trec: give --rerank"),
        ({"rerank": str(tmp_path / "embedder")}, "a retrieval workdir; this takes a reranking"),
    ):
        with pytest.raises(UserError, match=message):
            evaluation.evaluate("", "nowhere", "dev", str(tmp_path / "out"), **options)


def test_agreement_with_the_first_stage_is_the_mean_spearman_over_the_reranked_passages():
    first = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}, "q2": {"a": 2.0, "b": 1.0}}
    inverted = {"q1": {"a": 0.1, "b": 0.2, "c": 0.3, "d": 9.0}, "q2": {"a": 0.0, "b": 1.0}}
    assert evaluation._agreement(first, inverted, 3) == pytest.approx(-1.0)  # d: below 3
    kept = {"q1": {"a": 5.0, "b": 1.0, "c": 2.0, "d": 0.0}, "q2": {"a": 1.0, "b": 0.0}}
    assert evaluation._agreement(first, kept, 3) == pytest.approx((0.5 + 1.0) / 2)
    # A query whose reranked scores are all equal has no correlation: left out.
    flat = {"q1": dict.fromkeys("abcd", 1.0), "q2": {"a": 1.0, "b": 0.0}}
    assert evaluation._agreement(first, flat, 3) == pytest.approx(1.0)
    assert evaluation._agreement(first, flat, 1) is None


@pytest.mark.parametrize("flag", ["rerank_depth", "rerank_step"])
def test_a_reranking_flag_without_a_reranker_is_one_line(flag, tmp_path):
    args = types.SimpleNamespace(
        argv=["evaluate"], data_dir=str(tmp_path), split=None, out=str(tmp_path / "out"),
        workdir=str(tmp_path), first_stage="", rerank="", rerank_depth=None, rerank_step=None,
    )  # fmt: skip
    setattr(args, flag, 3)
    with pytest.raises(UserError, match=f"^--{flag}=3: give --rerank, the reranker$"):
        evaluation.main(args)


@pytest.mark.integration
def test_retrieve_then_rerank_prints_both_stages_and_writes_both_runs(minilm_workdir, tmp_path):
    beir = write_beir(tmp_path / "beir")
    reranker = finetuned_workdir(minilm_workdir, tmp_path, "reranking")  # a random head
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "bertjax.retrieval", "evaluate", f"--workdir={minilm_workdir}",
         f"--data_dir={beir}", "--split=test", f"--out={out}", f"--rerank={reranker}",
         "--rerank_depth=5"],
        cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    first, reranked, chance, wrote = result.stdout.splitlines()
    assert first.startswith("first stage  ndcg@10 ") and reranked.startswith(
        "reranked     ndcg@10 "
    )
    assert wrote == f"wrote {out / 'run.trec'}, metrics.json and first_stage/"
    assert sorted(os.listdir(out)) == ["first_stage", "metrics.json", "run.trec"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["rerank_depth"], metrics["queries_scored"]) == (5, 10)
    # The rest of the first stage below the five reranked: Recall@100 is the same.
    first_stage = json.loads((out / "first_stage" / "metrics.json").read_text())
    assert metrics["recall@100"] == first_stage["recall@100"]
    # The bar a reranker must clear: the first stage's top 5 in a random order.
    collection = retrieval_input.load_collection(str(beir), "test")
    first_run = retrieval_metrics.read_trec_run(str(out / "first_stage" / "run.trec"))
    by_chance = retrieval_metrics.random_order_ndcg(collection.qrels, first_run, 5)
    assert metrics["ndcg@10_random_order"] == by_chance
    reranked_run = retrieval_metrics.read_trec_run(str(out / "run.trec"))
    rhos = [
        scipy.stats.spearmanr(
            [first_run[q][d] for d in top], [reranked_run[q][d] for d in top]
        ).statistic
        for q in first_run
        for top in [retrieval_metrics.ranking(first_run[q])[:5]]
    ]
    assert metrics["spearman_with_first_stage"] == pytest.approx(np.mean(rhos), abs=1e-6)
    assert chance == f"by chance    ndcg@10 {by_chance:.4f} (the first 5 in a random order)"
