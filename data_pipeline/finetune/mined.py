"""The negatives file `python -m bertjax.retrieval mine` writes, read against a BEIR
collection: one JSON line per query of a split, its negatives best ranked first,

    {"query_id": "q1", "negatives": ["d7", "d3"], "scores": [0.71, 0.69],
     "scorer_scores": [2.1, -0.4], "scorer_positives": {"d2": 5.3}}

where "scorer_scores" (a reranker's score of each negative) and "scorer_positives" (of
each passage judged relevant to the query) are there when it mined with `--scorer`. The
reranking task reads the negatives; the retrieval task reads them as hard negatives and,
for Margin-MSE, the scorer's margins (a relevant passage's score less each negative's).

Every problem names the file and line: a query or passage the collection lacks, a query
twice, a query with no relevant passage, a negative judged relevant, a passage listed
twice, a scorer's scores of another length than the negatives or of a passage that is
not relevant to the query; and a query of the split's judgments with no line.
"""

import dataclasses
import json
import math

from data_pipeline.finetune.records import OPTION_PREFIX, TaskDataError, read_text_file


@dataclasses.dataclass(frozen=True)
class Line:
    negatives: list[str]  # passage ids, best ranked first
    # The scorer's score of each negative, and of the query's relevant passages by id;
    # None when the file was mined without a scorer.
    scorer_scores: list[float] | None = None
    scorer_positives: dict[str, float] | None = None


def read(path, option, qrels, split, queries, corpus) -> dict[str, Line]:
    """query id -> its Line, every query of the split's qrels with a relevant passage
    having one (`option`: the config.data option that named the file)."""
    lines, where, seen = {}, f"qrels/{split}.tsv", {}
    for number, raw in enumerate(read_text_file(path, option).split("\n"), start=1):
        if not raw.strip():
            continue
        at = f"{path}: line {number}"
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{at} is not valid JSON ({e.msg})") from None
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("query_id"), str)
            or not isinstance(record.get("negatives"), list)
        ):
            raise TaskDataError(f'{at}: expected {{"query_id": "...", "negatives": [passage ids]}}')
        query = record["query_id"]
        if query not in queries:
            raise TaskDataError(f"{at}: query {query!r} is not in queries.jsonl")
        if query in seen:
            raise TaskDataError(f"{at}: query {query!r} again (first at line {seen[query]})")
        judged = qrels.get(query, {})
        if not any(score > 0 for score in judged.values()):
            raise TaskDataError(f"{at}: query {query!r} has no relevant passage in {where}")
        for passage in record["negatives"]:
            if not isinstance(passage, str) or passage not in corpus:
                raise TaskDataError(f"{at}: passage {passage!r} is not in corpus.jsonl")
            if judged.get(passage, 0) > 0:
                raise TaskDataError(
                    f"{at}: passage {passage!r} is judged relevant to query {query!r} in "
                    f"{where}, not a negative"
                )
        if len(set(record["negatives"])) != len(record["negatives"]):
            raise TaskDataError(f"{at}: a passage is listed twice")
        seen[query] = number
        lines[query] = Line(record["negatives"], *_scorer(record, at, judged, where))
    missing = [q for q, judged in qrels.items() if q not in lines and max(judged.values()) > 0]
    if missing:
        raise TaskDataError(
            f"{path} ({OPTION_PREFIX}{option}): query {missing[0]!r} of {where} has no line "
            f"({len(missing)} queries lack one)"
        )
    return lines


def _scorer(record: dict, at: str, judged: dict, where: str):
    """The line's scorer scores, checked: (None, None) without them."""
    scores, positives = record.get("scorer_scores"), record.get("scorer_positives")
    if scores is None and positives is None:
        return None, None
    if not isinstance(scores, list) or not isinstance(positives, dict):
        raise TaskDataError(
            f'{at}: "scorer_scores" (a list) and "scorer_positives" (an object) go together'
        )
    if len(scores) != len(record["negatives"]):
        raise TaskDataError(
            f'{at}: {len(scores)} "scorer_scores" for {len(record["negatives"])} negatives'
        )
    for passage in positives:
        if judged.get(passage, 0) <= 0:
            raise TaskDataError(
                f'{at}: "scorer_positives" scores {passage!r}, which {where} does not judge '
                f"relevant to query {record['query_id']!r}"
            )
    values = [*scores, *positives.values()]
    if not all(_is_number(v) for v in values):
        raise TaskDataError(f"{at}: a scorer score is not a finite number")
    return [float(s) for s in scores], {p: float(s) for p, s in positives.items()}


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
