"""Retrieval measures against values worked out by hand, then against pytrec_eval (trec_eval)
on random runs."""

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

from bertjax import retrieval_metrics

TREC_EVAL_MEASURES = {
    "ndcg_cut_10": "ndcg@10",
    "recall_100": "recall@100",
    "map_cut_100": "map@100",
}

# ----------------------------------------------------------------------------- by hand


def test_one_relevant_doc_at_rank_3():
    values = retrieval_metrics.evaluate({"q": {"c": 1}}, {"q": {"a": 3.0, "b": 2.0, "c": 1.0}})
    # DCG 1 / log2(4), ideal DCG 1; the one relevant doc found at rank 3: precision 1/3.
    assert values == pytest.approx(
        {"ndcg@10": 0.5, "mrr@10": 1 / 3, "recall@100": 1.0, "map@100": 1 / 3}, abs=1e-15
    )


def test_graded_relevance():
    qrels = {"q": {"a": 3, "b": 1, "c": 2}}
    run = {"q": {"x": 3.0, "b": 2.0, "a": 1.0}}  # x unjudged, c not retrieved
    values = retrieval_metrics.evaluate(qrels, run)
    # Gains (0, 1, 3) against the ideal (3, 2, 1).
    dcg = 1 / math.log2(3) + 3 / math.log2(4)
    ideal = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert values == pytest.approx(
        {
            "ndcg@10": dcg / ideal,
            "mrr@10": 1 / 2,
            "recall@100": 2 / 3,
            "map@100": (1 / 2 + 2 / 3) / 3,  # b at rank 2, a at rank 3; c counts as 0
        },
        abs=1e-15,
    )


def test_zero_and_negative_relevance_are_not_relevant():
    qrels = {"q": {"a": -2, "b": 0, "c": 1}}
    values = retrieval_metrics.evaluate(qrels, {"q": {"a": 3.0, "b": 2.0, "c": 1.0}})
    # a and b gain nothing, and take nothing off: c alone at rank 3.
    assert values == pytest.approx(
        {"ndcg@10": 0.5, "mrr@10": 1 / 3, "recall@100": 1.0, "map@100": 1 / 3}, abs=1e-15
    )
    nothing_relevant = {"q": {"a": -1, "b": 0}}
    assert retrieval_metrics.evaluate(
        nothing_relevant, {"q": {"a": 1.0, "b": 2.0}}
    ) == dict.fromkeys(retrieval_metrics.MEASURES, 0.0)


def test_cutoffs():
    run = {"q": {f"d{rank:03d}": -float(rank) for rank in range(1, 201)}}
    at_11 = retrieval_metrics.evaluate({"q": {"d011": 1}}, run)
    assert at_11 == pytest.approx(
        {"ndcg@10": 0.0, "mrr@10": 0.0, "recall@100": 1.0, "map@100": 1 / 11}, abs=1e-15
    )
    assert retrieval_metrics.evaluate({"q": {"d101": 1}}, run) == dict.fromkeys(
        retrieval_metrics.MEASURES, 0.0
    )
    # Twelve relevant docs at ranks 1..12: the ideal DCG@10 counts ten of them too.
    top_12 = retrieval_metrics.evaluate({"q": {f"d{rank:03d}": 1 for rank in range(1, 13)}}, run)
    assert top_12 == pytest.approx(
        {"ndcg@10": 1.0, "mrr@10": 1.0, "recall@100": 1.0, "map@100": 1.0}, abs=1e-15
    )


def test_ties_rank_by_doc_id_descending():
    # Equal scores: the greater id first, byte by byte ("d9" > "d10", "a" > "B").
    assert retrieval_metrics.ranking({"a": 1.0, "b": 1.0, "c": 2.0}) == ["c", "b", "a"]
    assert retrieval_metrics.ranking({"d10": 0.5, "d9": 0.5, "d1": 0.5}) == ["d9", "d10", "d1"]
    assert retrieval_metrics.ranking({"B": 0.0, "a": 0.0, "ab": 0.0}) == ["ab", "a", "B"]
    assert retrieval_metrics.evaluate({"q": {"a": 1}}, {"q": {"a": 1.0, "b": 1.0}})["mrr@10"] == 0.5


def test_scores_compare_as_float32():
    # 1 + 2**-24 rounds to 1 in float32 (half way, to even): a tie; 1 + 2**-23 does not.
    assert retrieval_metrics.ranking({"a": 1 + 2**-24, "b": 1.0}) == ["b", "a"]
    assert retrieval_metrics.ranking({"a": 1 + 2**-23, "b": 1.0}) == ["a", "b"]
    assert retrieval_metrics.ranking({"a": np.float32(0.25), "b": 1}) == ["b", "a"]


def test_which_queries_count():
    qrels = {"q1": {"a": 1}, "no_run": {"a": 1}, "unjudged": {}, "no_docs": {"a": 1}}
    run = {"q1": {"a": 1.0}, "unjudged": {"a": 1.0}, "no_qrels": {"a": 1.0}, "no_docs": {}}
    # In both, with a judged doc; a query that retrieved nothing scores 0.
    assert retrieval_metrics.per_query(qrels, run) == {
        "q1": dict.fromkeys(retrieval_metrics.MEASURES, 1.0),
        "no_docs": dict.fromkeys(retrieval_metrics.MEASURES, 0.0),
    }
    assert retrieval_metrics.evaluate(qrels, run) == dict.fromkeys(retrieval_metrics.MEASURES, 0.5)


def test_nothing_to_score_and_nan_fail():
    with pytest.raises(ValueError, match="none of the run's 1 queries"):
        retrieval_metrics.evaluate({"q": {"a": 1}}, {"p": {"a": 1.0}})
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics.evaluate({"q": {"a": 1}}, {"q": {"a": math.nan, "b": 1.0}})


def test_importing_metrics_starts_neither_jax_nor_tensorflow():
    script = (
        "import sys; import bertjax.retrieval_metrics; "
        "assert 'jax' not in sys.modules and 'tensorflow' not in sys.modules; print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr


# ----------------------------------------------------------------------------- against trec_eval


def random_qrels_and_run(seed: int):
    """Thirty queries over 400 docs: runs of 50 to 400 docs, a third of their scores
    tied (some only in float32), graded qrels from -1 to 3 that judge docs the run has
    and docs it lacks; queries of the qrels absent from the run and the reverse, one
    query with nothing relevant, one with many relevant docs and one with no judgment."""
    rng = np.random.default_rng(seed)
    # Ids of different lengths, so that string order is not numeric order.
    docs = [f"d{n}" for n in rng.permutation(400)]
    qrels, run = {}, {}
    for q in range(30):
        judged = rng.choice(docs, rng.integers(1, 60), replace=False).tolist()
        qrels[f"q{q}"] = {doc: int(rng.choice([-1, 0, 0, 1, 1, 2, 3])) for doc in judged}
        retrieved = rng.choice(docs, rng.integers(50, 401), replace=False).tolist()
        # Relevant docs score higher on the whole, so that the measures are not all near 0.
        bonus = [max(qrels[f"q{q}"].get(doc, 0), 0) for doc in retrieved]
        scores = rng.normal(size=len(retrieved)) + np.array(bonus)
        tied = rng.random(len(retrieved)) < 0.3
        scores[tied] = np.round(scores[tied], 1)
        near = rng.random(len(retrieved)) < 0.05  # tied with others only in float32
        scores[near] = np.round(scores[near], 1) + 1e-9
        run[f"q{q}"] = dict(zip(retrieved, scores.tolist(), strict=True))
    qrels["q0"] = dict.fromkeys(qrels["q0"], 0)  # nothing relevant
    qrels["q1"] = {doc: 1 + int(rng.integers(3)) for doc in list(run["q1"])[:40]}
    del run["q2"]  # judged, not retrieved: left out
    del qrels["q3"]  # retrieved, not judged: left out
    run["q_extra"] = {"d1": 1.0}
    qrels["q_empty"], run["q_empty"] = {}, {"d1": 1.0}  # no judgment: left out
    return qrels, run


def trec_eval_per_query(qrels, run) -> dict[str, dict[str, float]]:
    """pytrec_eval's figures under our names; MRR@10 is recip_rank on the run cut to its
    top 10 (in trec_eval's order: test_ranking_is_trec_evals)."""
    import pytrec_eval

    full = pytrec_eval.RelevanceEvaluator(qrels, set(TREC_EVAL_MEASURES)).evaluate(run)
    top_10 = {
        qid: {d: scores[d] for d in retrieval_metrics.ranking(scores)[:10]}
        for qid, scores in run.items()
    }
    cut = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top_10)
    return {
        qid: {ours: values[theirs] for theirs, ours in TREC_EVAL_MEASURES.items()}
        | {"mrr@10": cut[qid]["recip_rank"]}
        for qid, values in full.items()
    }


def test_ranking_is_trec_evals(test_extras):
    import pytrec_eval

    rng = np.random.default_rng(0)
    docs = [f"d{n}" for n in range(60)] + ["a", "B", "ab", "é", "z", "A1"]
    scores = dict(
        zip(docs, rng.choice([0.0, 0.5, 1.0, 1 + 2**-24, 1 + 2**-23], len(docs)), strict=True)
    )
    # trec_eval's rank of each doc: 1 / its recip_rank when it alone is relevant.
    qrels = {doc: {doc: 1} for doc in docs}
    values = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(
        dict.fromkeys(docs, scores)
    )
    trec_eval_order = sorted(docs, key=lambda doc: 1 / values[doc]["recip_rank"])
    assert retrieval_metrics.ranking(scores) == trec_eval_order


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_agrees_with_pytrec_eval(test_extras, seed):
    qrels, run = random_qrels_and_run(seed)
    expected = trec_eval_per_query(qrels, run)
    ours = retrieval_metrics.per_query(qrels, run)
    assert sorted(ours) == sorted(expected) == sorted(set(qrels) & set(run) - {"q_empty"})
    for qid, values in expected.items():
        assert ours[qid] == pytest.approx(values, abs=1e-9), qid
    means = {
        m: np.mean([values[m] for values in expected.values()]) for m in retrieval_metrics.MEASURES
    }
    assert retrieval_metrics.evaluate(qrels, run) == pytest.approx(means, abs=1e-9)


# ----------------------------------------------------------------------------- run files


def test_a_written_run_reads_back_with_the_same_figures(test_extras, tmp_path):
    import pytrec_eval

    qrels, run = random_qrels_and_run(4)
    # float32 scores, as a search returns them, and their exact values back.
    run = {qid: {d: np.float32(s) for d, s in scores.items()} for qid, scores in run.items()}
    path = str(tmp_path / "run.trec")
    retrieval_metrics.write_trec_run(path, run)

    with open(path, encoding="utf-8") as f:
        parsed = pytrec_eval.parse_run(f)
    assert retrieval_metrics.read_trec_run(path) == parsed
    for qid, scores in run.items():
        assert list(parsed[qid]) == retrieval_metrics.ranking(scores)[:100]  # the file's order
        assert all(parsed[qid][d] == float(scores[d]) for d in parsed[qid])
    # Every measure looks at the top 100 alone.
    ours = retrieval_metrics.per_query(qrels, parsed)
    assert ours == retrieval_metrics.per_query(qrels, run)
    for qid, values in trec_eval_per_query(qrels, parsed).items():
        assert ours[qid] == pytest.approx(values, abs=1e-9), qid


def test_run_file_lines(tmp_path):
    path = str(tmp_path / "run.trec")
    run = {"q1": {f"d{n}": n / 10 for n in range(150)}, "q2": {"x": 0.25, "y": 0.25}}
    retrieval_metrics.write_trec_run(path, run)
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert len(lines) == 100 + 2  # q1 cut to the top 100
    assert lines[0] == "q1 Q0 d149 1 14.9 bertjax"
    assert lines[99] == "q1 Q0 d50 100 5.0 bertjax"
    assert lines[100:] == ["q2 Q0 y 1 0.25 bertjax", "q2 Q0 x 2 0.25 bertjax"]

    retrieval_metrics.write_trec_run(path, run, depth=1, tag="dense")
    assert (tmp_path / "run.trec").read_text() == "q1 Q0 d149 1 14.9 dense\nq2 Q0 y 1 0.25 dense\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.trec"]  # no temporary left


def test_bad_run_files_fail(tmp_path):
    path = str(tmp_path / "run.trec")
    with pytest.raises(ValueError, match="'my doc': a field"):
        retrieval_metrics.write_trec_run(path, {"q": {"my doc": 1.0}})
    with pytest.raises(ValueError, match="depth=0"):
        retrieval_metrics.write_trec_run(path, {"q": {"d": 1.0}}, depth=0)
    (tmp_path / "run.trec").write_text("q Q0 d 1 0.5 t\nq Q0 d 2 0.4 t\n")
    with pytest.raises(ValueError, match=r"run.trec:2: doc 'd' twice for query 'q'"):
        retrieval_metrics.read_trec_run(path)
    (tmp_path / "run.trec").write_text("q Q0 d 1 0.5\n")
    with pytest.raises(ValueError, match=r"run.trec:1: 5 fields, not 6"):
        retrieval_metrics.read_trec_run(path)


def test_the_random_order_figure_is_the_mean_over_every_order_of_the_reranked_docs():
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(12)]
    run = {
        "q1": dict(zip(docs, -np.arange(12.0), strict=True)),
        "q2": dict(zip(docs, -np.arange(12.0), strict=True)),
        "q3": {"d0": 1.0},  # unjudged: left out, as evaluate leaves it out
    }
    qrels = {"q1": {"d1": 2, "d3": 1, "d6": 1, "d11": 3}, "q2": {"d9": 1, "x": 1}}
    for depth in (1, 4, 7):
        orders = list(itertools.permutations(range(depth)))
        mean = 0.0
        for order in orders:
            shuffled = {}
            for qid in ("q1", "q2"):
                ranked = docs[:depth]
                placed = [ranked[i] for i in order] + docs[depth:]
                shuffled[qid] = {doc: -rank for rank, doc in enumerate(placed)}
            mean += retrieval_metrics.evaluate(qrels, shuffled)["ndcg@10"] / len(orders)
        assert retrieval_metrics.random_order_ndcg(qrels, run, depth) == pytest.approx(mean)
    # Deeper than 10: a doc then counts only at ranks 1 to 10.
    samples = []
    for _ in range(4000):
        placed = [docs[i] for i in rng.permutation(12)]
        shuffled = {qid: {doc: -r for r, doc in enumerate(placed)} for qid in ("q1", "q2")}
        samples.append(retrieval_metrics.evaluate(qrels, shuffled)["ndcg@10"])
    expected = retrieval_metrics.random_order_ndcg(qrels, run, 12)
    assert expected == pytest.approx(np.mean(samples), abs=4 * np.std(samples) / 4000**0.5)
