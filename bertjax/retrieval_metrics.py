"""Retrieval measures as trec_eval computes them, in Python and NumPy (no jax): the figures
of pytrec_eval, which embeds trec_eval 9 and which BEIR and MTEB call.

qrels map a query id to {doc id: relevance}, an int, relevant when > 0; a run maps a
query id to {doc id: score}. A query's docs rank as trec_eval's form_res_rels.c sorts
them: by score, descending, compared as C floats (float32: scores closer than that are
tied), ties broken by doc id in descending byte order ("b" before "a", "d9" before
"d10"). A doc the qrels do not judge is not relevant. With R the number of relevant
docs in the qrels and rel(i) the relevance of the doc at rank i (0 unless > 0):

  ndcg@10     ndcg_cut_10 (m_ndcg_cut.c): DCG@10 / ideal DCG@10, where
              DCG@k = sum over ranks i <= k of rel(i) / log2(i + 1) and the ideal ranks
              the qrels' positive relevances in descending order; 0 when R = 0
  mrr@10      recip_rank (m_recip_rank.c) of the run cut to its top 10: 1 / the rank of
              the first relevant doc, 0 if none is in the top 10
  recall@100  recall_100 (m_recall.c): relevant docs in the top 100 / R; 0 when R = 0
  map@100     map_cut_100 (m_map_cut.c): the sum of the precision at the rank of each
              relevant doc in the top 100, / R; 0 when R = 0
"""

import math
from collections.abc import Mapping, Sequence

import numpy as np

from data_pipeline import files

MEASURES = ("ndcg@10", "mrr@10", "recall@100", "map@100")
# Passages kept per query in a run: what Recall@100 and MAP@100 read.
DEPTH = 100


def ranking(scores: Mapping[str, float]) -> list[str]:
    """A query's doc ids in trec_eval's order (the module docstring says which)."""
    rounded = np.asarray(list(scores.values()), dtype=np.float32)
    if np.isnan(rounded).any():
        raise ValueError("a score is NaN: trec_eval's order is undefined")
    # The float32 values exactly, as Python floats (fast to compare); Python orders
    # strings by code point, as strcmp orders their UTF-8 bytes.
    return [doc for _, doc in sorted(zip(rounded.tolist(), scores, strict=True), reverse=True)]


def per_query(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """{query id: {measure: value}} for each query that trec_eval scores: those of the run
    with at least one doc judged in the qrels (a query with no relevant doc scores 0)."""
    return {qid: _measures(qrels[qid], ranking(run[qid])) for qid in run if qrels.get(qid)}


def evaluate(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """The mean of each of MEASURES over the queries trec_eval scores: those in both the
    run and the qrels, with at least one judged doc (as pytrec_eval, and so BEIR and
    MTEB, average them). Queries of the qrels that the run lacks are left out, not 0."""
    scored = per_query(qrels, run)
    if not scored:
        raise ValueError(f"none of the run's {len(run)} queries has judgments in the qrels")
    return {m: sum(values[m] for values in scored.values()) / len(scored) for m in MEASURES}


def random_order_ndcg(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]], depth: int
) -> float:
    """The expected nDCG@10 of `run` with each query's first `depth` docs shuffled, every
    order alike, and the rest left below them: what reranking those docs scores by chance.
    A doc of the first `depth` is at each of their ranks with probability 1 / depth.
    Averaged over the queries `evaluate` averages over."""
    scored = [qid for qid in run if qrels.get(qid)]
    if not scored:
        raise ValueError(f"none of the run's {len(run)} queries has judgments in the qrels")
    # A doc's mean discount over the ranks it may take (none counts below rank 10).
    shuffled = sum(1 / math.log2(rank + 1) for rank in range(1, min(depth, 10) + 1)) / depth
    total = 0.0
    for qid in scored:
        judged = qrels[qid]
        gains = [max(judged.get(doc, 0), 0) for doc in ranking(run[qid])[: max(depth, 10)]]
        below = _dcg(gains[:10]) - _dcg(gains[: min(depth, 10)])  # ranks depth+1 to 10
        ideal = _dcg(sorted((rel for rel in judged.values() if rel > 0), reverse=True)[:10])
        if ideal:
            total += (sum(gains[:depth]) * shuffled + below) / ideal
    return total / len(scored)


def _measures(judged: Mapping[str, int], ranked: Sequence[str]) -> dict[str, float]:
    positive = sorted((rel for rel in judged.values() if rel > 0), reverse=True)
    if not positive:
        return dict.fromkeys(MEASURES, 0.0)
    relevant = len(positive)
    gains = [max(judged.get(doc, 0), 0) for doc in ranked[:100]]
    hits = [rank for rank, gain in enumerate(gains, 1) if gain > 0]  # relevant, top 100
    return {
        "ndcg@10": _dcg(gains[:10]) / _dcg(positive[:10]),
        "mrr@10": 1.0 / hits[0] if hits and hits[0] <= 10 else 0.0,
        "recall@100": len(hits) / relevant,
        # The k-th relevant doc found, at rank r, adds the precision k / r.
        "map@100": sum(k / rank for k, rank in enumerate(hits, 1)) / relevant,
    }


def _dcg(gains: Sequence[int]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, 1))


# ----------------------------------------------------------------------------- run files


def write_trec_run(
    path: str, run: Mapping[str, Mapping[str, float]], depth: int = 100, tag: str = "bertjax"
) -> None:
    """Writes `run` as a TREC run file, atomically (a local path or a gs:// URL): for each
    query its top `depth` docs in trec_eval's order, one line `query_id Q0 doc_id rank
    score tag` each, ranks from 1.
    A score is written as the repr of its float, so reading it back gives the same value
    (a float32 score's exact value) and the same order."""
    if depth < 1:
        raise ValueError(f"depth={depth}: at least 1")
    _field(tag)
    lines = []
    for qid, scores in run.items():
        for rank, doc in enumerate(ranking(scores)[:depth], 1):
            fields = (_field(qid), "Q0", _field(doc), str(rank), repr(float(scores[doc])), tag)
            lines.append(" ".join(fields) + "\n")
    files.atomic_write(path, "".join(lines))


def read_trec_run(path: str) -> dict[str, dict[str, float]]:
    """A TREC run file (`query_id Q0 doc_id rank score tag` lines) as a run: the scores,
    not the ranks, order each query's docs, as trec_eval reads the file."""
    run = {}
    text = files.read_bytes(path).decode("utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if len(fields) != 6:
            raise ValueError(f"{path}:{number}: {len(fields)} fields, not 6: {line!r}")
        qid, _, doc, _, score, _ = fields
        scores = run.setdefault(qid, {})
        if doc in scores:
            raise ValueError(f"{path}:{number}: doc {doc!r} twice for query {qid!r}")
        scores[doc] = float(score)
    return run


def _field(text: str) -> str:
    if text.split() != [text]:
        raise ValueError(f"{text!r}: a field of a TREC run file is not empty and has no space")
    return text
