"""The mining tool's negatives file read against its collection: lines, scorer scores,
and each bad line named."""

import json

import pytest
from support.beir_files import write_beir

from data_pipeline.finetune import mined
from data_pipeline.finetune.records import TaskDataError
from data_pipeline.finetune.retrieval_input import read_beir, read_qrels


def read(tmp_path, lines):
    directory = write_beir(tmp_path / "beir")
    path = tmp_path / "negatives.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    corpus, queries = read_beir(directory)
    qrels = read_qrels(directory, "train", queries, corpus, "train_split")
    return mined.read(str(path), "negatives_file", qrels, "train", queries, corpus)


def every_query(**extra):
    return [
        {"query_id": f"q{i}", "negatives": [f"d{i + 1}", f"d{i + 2}"], **extra} for i in range(30)
    ]


def test_each_querys_negatives_and_its_scorers_scores(tmp_path):
    lines = every_query()
    lines[3] |= {"scorer_scores": [1.5, -2], "scorer_positives": {"d3": 4.25}}
    read_lines = read(tmp_path, lines)
    assert len(read_lines) == 30
    assert read_lines["q0"] == mined.Line(["d1", "d2"])
    assert read_lines["q3"] == mined.Line(["d4", "d5"], [1.5, -2.0], {"d3": 4.25})


@pytest.mark.parametrize(
    "line,message",
    [
        ({"query_id": "q99", "negatives": ["d1"]}, "line 1: query 'q99' is not in queries.jsonl"),
        ({"query_id": "q0", "negatives": ["nope"]}, "line 1: passage 'nope' is not in corpus"),
        ({"query_id": "q35", "negatives": ["d1"]}, "line 1: query 'q35' has no relevant passage"),
        ({"query_id": "q0", "negatives": ["d0"]}, "passage 'd0' is judged relevant to query 'q0'"),
        ({"query_id": "q0", "negatives": ["d1", "d1"]}, "line 1: a passage is listed twice"),
        ({"query": "q0"}, 'line 1: expected {"query_id"'),
        ({"query_id": "q0", "negatives": ["d1"]}, r"query 'q1' of qrels/train.tsv has no line"),
    ],
)
def test_a_bad_line_is_named(tmp_path, line, message):
    with pytest.raises(TaskDataError, match=message):
        read(tmp_path, [line])


@pytest.mark.parametrize(
    "scorer,message",
    [
        ({"scorer_scores": [1.0, 2.0]}, '"scorer_scores" .a list. and "scorer_positives"'),
        ({"scorer_scores": [1.0], "scorer_positives": {"d0": 3.0}}, '1 "scorer_scores" for 2'),
        (
            {"scorer_scores": [1.0, 2.0], "scorer_positives": {"d9": 3.0}},
            "\"scorer_positives\" scores 'd9', which qrels/train.tsv does not judge relevant",
        ),
        (
            {"scorer_scores": [1.0, "high"], "scorer_positives": {"d0": 3.0}},
            "line 1: a scorer score is not a finite number",
        ),
        (
            {"scorer_scores": [1.0, 2.0], "scorer_positives": {"d0": float("nan")}},
            "line 1: a scorer score is not a finite number",
        ),
    ],
)
def test_bad_scorer_scores_are_named(tmp_path, scorer, message):
    lines = every_query()
    lines[0] |= scorer
    with pytest.raises(TaskDataError, match=message):
        read(tmp_path, lines)
