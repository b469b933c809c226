"""Reranking data: groups from a BEIR directory and its negatives, rows of groups or pairs,
the pairs' layout in a batch, held-out candidates, and bad input."""

import json

import numpy as np
import pytest
from support.beir_files import write_beir

from data_pipeline.errors import ConfigError
from data_pipeline.finetune import reranking_input, retrieval_input
from data_pipeline.finetune.records import TaskDataError

CLS, SEP = 101, 102


def write_negatives(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def beir_task(tmp_path, count=3, **options):
    """write_beir's collection, each train query's negatives the next `count` passages;
    dev's, the two before."""
    directory = write_beir(tmp_path / "beir")
    train = [
        {"query_id": f"q{i}", "negatives": [f"d{(i + k) % 40}" for k in range(1, count + 1)]}
        for i in range(30)
    ]
    dev = [{"query_id": f"q{i}", "negatives": [f"d{i - 1}", f"d{i - 2}"]} for i in range(30, 40)]
    config = {
        "beir_dir": str(directory),
        "negatives_file": write_negatives(tmp_path / "train.jsonl", train),
        "eval_negatives_file": write_negatives(tmp_path / "dev.jsonl", dev),
        "num_negatives": 3,
        **options,
    }
    return reranking_input.load_reranking_task(config)


def test_a_beir_directory_and_its_negatives_make_a_group_per_relevant_passage(tmp_path):
    task = beir_task(tmp_path)
    groups = task.train
    assert len(groups) == 30 and groups.candidates.shape == (30, 4)
    first = [groups.passages[i] for i in groups.candidates[0]]
    assert groups.queries[groups.query[0]] == "where is zorax 0"
    assert first[0] == "Item 0 the zorax number 0 is kept in the south hall"
    assert first[1].startswith("Item 1 the zorel number 1")
    assert (groups.labels == [1, 0, 0, 0]).all()


def test_a_query_with_fewer_negatives_than_the_group_holds_is_padded(tmp_path):
    groups = beir_task(tmp_path, count=2).train
    assert (groups.candidates[:, 3] == -1).all() and (groups.candidates[:, :3] >= 0).all()


def test_held_out_queries_are_reranked_among_their_judged_passages_and_negatives(tmp_path):
    candidates = beir_task(tmp_path).eval
    assert candidates.query_ids == [f"q{i}" for i in range(30, 40)]
    pairs = [(candidates.query_ids[q], candidates.passage_ids[d]) for q, d in candidates.pairs]
    assert pairs[:3] == [("q30", "d30"), ("q30", "d29"), ("q30", "d28")]
    assert len(pairs) == 30 and candidates.qrels["q31"] == {"d31": 1}


def test_rows_of_groups_and_rows_of_pairs(tmp_path):
    path = tmp_path / "groups.tsv"
    path.write_text("q\tpos\tn1\tn2\na\tone\ttwo\tthree\nb\ttwo\tone\tfour\n")
    config = {"train_file": str(path), "eval_file": str(path), "query": "q", "positive": "pos"}
    task = reranking_input.load_reranking_task({**config, "negatives": ("n1", "n2")})
    assert task.train.queries == ["a", "b"]
    assert task.train.passages == ["one", "two", "three", "four"]
    assert task.train.candidates.tolist() == [[0, 1, 2], [1, 0, 3]]
    assert task.eval.qrels == {"q0": {"d0": 1, "d1": 0, "d2": 0}, "q1": {"d1": 1, "d0": 0, "d3": 0}}

    pairs = tmp_path / "pairs.jsonl"
    rows = [("a", "one", 1), ("a", "two", 0.25), ("b", "two", 0.75), ("b", "one", 0)]
    pairs.write_text("".join(json.dumps({"q": q, "p": p, "y": y}) + "\n" for q, p, y in rows))
    config = {"train_file": str(pairs), "eval_file": str(pairs), "query": "q"}
    task = reranking_input.load_reranking_task({**config, "passage": "p", "label": "y"})
    assert task.train.candidates.shape == (4, 1)
    assert task.train.labels[:, 0].tolist() == [1.0, 0.25, 0.75, 0.0]
    assert task.eval.qrels == {"q0": {"d0": 1, "d1": 0}, "q1": {"d1": 1, "d0": 0}}


def test_a_training_batch_lays_each_groups_pairs_side_by_side(tmp_path, tokenizer):
    path = tmp_path / "groups.tsv"
    query = "the query that runs on " + "and on " * 10
    path.write_text(f"query\tpositive\tneg\n{query}\tshort passage\tother words here\n")
    task = reranking_input.load_reranking_task(
        {"train_file": str(path), "negatives": ("neg",), "max_query_length": 5,
         "max_seq_length": 16, "length_buckets": 2}
    )  # fmt: skip
    dataset, info = reranking_input.make_reranking_dataset(
        task, tokenizer, split="train", batch_size=2, seed=0, num_epochs=2
    )
    (batch,) = list(dataset.as_numpy_iterator())
    assert info.num_batches == 1
    # 3 + 5 query pieces + 3 passage pieces = 11 tokens: the bucket of 16, not of 8.
    assert batch["input_ids"].shape == (2, 2 * 16)
    ids = batch["input_ids"].reshape(2, 2, 16)[0]
    segments = batch["segment_ids"].reshape(2, 2, 16)[0]
    mask = batch["input_mask"].reshape(2, 2, 16)[0]
    query_pieces = tokenizer.tokenize([query]).flat_values.numpy()[:5].tolist()
    for pair, passage in zip(ids, ("short passage", "other words here"), strict=True):
        pieces = tokenizer.tokenize([passage]).flat_values.numpy().tolist()
        expected = [CLS, *query_pieces, SEP, *pieces, SEP]
        assert pair[: len(expected)].tolist() == expected and not pair[len(expected) :].any()
    assert segments[0].tolist() == [0] * 7 + [1] * 3 + [0] * 6
    assert mask.sum(axis=1).tolist() == [10, 11]
    assert batch["labels"].tolist() == [[1, 0], [1, 0]]
    assert batch["candidate_weight"].tolist() == [[1, 1], [1, 1]]
    assert batch["stream_position"].tolist() == [[1], [1]]


def test_a_pair_too_long_gives_way_on_the_passage_side(tmp_path, tokenizer):
    path = tmp_path / "pairs.tsv"
    path.write_text("query\tpassage\tlabel\nshort query\t" + "word " * 40 + "\t1\n")
    task = reranking_input.load_reranking_task(
        {"train_file": str(path), "passage": "passage", "max_query_length": 8,
         "max_seq_length": 16}
    )  # fmt: skip
    dataset, _ = reranking_input.make_reranking_dataset(
        task, tokenizer, split="train", batch_size=1, seed=0, num_epochs=1
    )
    (batch,) = list(dataset.as_numpy_iterator())
    ids = batch["input_ids"][0].tolist()
    assert len(ids) == 16 and ids[:4] == [CLS, *tokenizer.tokenize(["short query"])[0], SEP]
    assert ids[-1] == SEP and batch["input_mask"].all()


def test_evaluation_batches_hold_every_pair_once(tmp_path, tokenizer):
    task = beir_task(tmp_path)
    dataset, info = reranking_input.make_reranking_dataset(
        task, tokenizer, split="eval", batch_size=4
    )
    batches = list(dataset.as_numpy_iterator())
    queries = np.concatenate([b["query_index"].reshape(-1) for b in batches])
    passages = np.concatenate([b["passage_index"].reshape(-1) for b in batches])
    kept = queries >= 0
    pairs = zip(queries[kept], passages[kept], strict=True)
    assert sorted(pairs) == sorted(map(tuple, task.eval.pairs))
    weights = np.concatenate([b["candidate_weight"].reshape(-1) for b in batches])
    assert (weights == kept).all()
    assert info.num_batches == 2  # 30 pairs, 4 to a row (the group's size), 4 rows a batch


def test_a_label_outside_zero_to_one_names_its_line(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("query,passage,label\na,b,1\na,c,2\n")
    with pytest.raises(TaskDataError, match="pairs.csv: line 3: 'label' is '2'"):
        reranking_input.load_reranking_task({"train_file": str(path), "passage": "passage"})


def test_held_out_queries_with_no_candidate_but_their_relevant_passages_are_refused(tmp_path):
    directory = write_beir(tmp_path / "beir")
    negatives = [{"query_id": f"q{i}", "negatives": ["d35"]} for i in range(30)]
    config = {
        "beir_dir": str(directory),
        "negatives_file": write_negatives(tmp_path / "n.jsonl", negatives),
    }
    message = r"config.data.eval_split='dev': 10 of its 10 queries \(the first 'q30'\) have no"
    with pytest.raises(ConfigError, match=message):
        reranking_input.load_reranking_task(config)
    assert reranking_input.load_reranking_task({**config, "eval_split": ""}).eval is None
    # One query without negatives is enough to be refused.
    dev = [{"query_id": f"q{i}", "negatives": ["d1"] if i != 34 else []} for i in range(30, 40)]
    config["eval_negatives_file"] = write_negatives(tmp_path / "dev.jsonl", dev)
    with pytest.raises(ConfigError, match=r"1 of its 10 queries \(the first 'q34'\)"):
        reranking_input.load_reranking_task(config)


def test_a_passage_relevant_in_one_row_and_not_in_another_names_both_lines(tmp_path):
    path = tmp_path / "groups.tsv"
    path.write_text("query\tpositive\tneg\na\tone\ttwo\na\ttwo\tthree\n")
    with pytest.raises(TaskDataError, match=r"groups.tsv: line 3: the passage 'two' is relevant"):
        reranking_input.load_reranking_task({"train_file": str(path), "negatives": ("neg",)})


def test_a_runs_stream_positions_cover_its_negatives_file():
    config = reranking_input.from_config({"beir_dir": "b", "negatives_file": "n.jsonl"})
    assert retrieval_input.train_files(config) == (
        "b/corpus.jsonl", "b/queries.jsonl", "b/qrels/train.tsv", "n.jsonl"
    )  # fmt: skip
    assert retrieval_input.train_files(reranking_input.from_config({"train_file": "g.tsv"})) == (
        "g.tsv",
    )
