"""Retrieval data: BEIR directories and pair files, the batches' layout, and bad input."""

import json

import numpy as np
import pytest
from support.beir_files import write_beir

from data_pipeline.errors import ConfigError
from data_pipeline.finetune import retrieval_config, retrieval_input
from data_pipeline.finetune.records import TaskDataError

CLS, SEP = 101, 102


def test_a_beir_directory_gives_training_pairs_and_a_held_out_collection(tmp_path):
    task = retrieval_input.load_retrieval_task({"beir_dir": str(write_beir(tmp_path))})
    assert len(task.train) == 30
    assert task.train.queries[0] == "where is zorax 0"
    assert task.train.passages[0] == ["Item 0 the zorax number 0 is kept in the south hall"]
    collection = task.eval
    assert collection.query_ids == [f"q{i}" for i in range(30, 40)]
    assert len(collection.passages) == 40  # the whole corpus is searched
    assert collection.qrels["q31"] == {"d31": 1}


def test_pair_files_name_their_columns_and_become_a_collection(tmp_path):
    rows = [
        {"q": "a", "pos": "one", "neg": "two"},
        {"q": "b", "pos": "two", "neg": "three"},
        {"q": "a", "pos": "four", "neg": "one"},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = {"train_file": str(path), "eval_file": str(path), "anchor": "q", "positive": "pos"}
    task = retrieval_input.load_retrieval_task({**config, "negatives": ("neg",)})
    assert task.train.passages == [["one", "two"], ["two", "three"], ["four", "one"]]
    collection = task.eval
    assert collection.queries == ["a", "b"] and collection.passages == [
        "one",
        "two",
        "three",
        "four",
    ]
    assert collection.qrels == {"q0": {"d0": 1, "d3": 1}, "q1": {"d1": 1}}


def test_training_batches_hold_each_rows_passages_side_by_side(tmp_path, tokenizer):
    path = tmp_path / "pairs.tsv"
    rows = "first query\tsame passage\tother\nsecond query\tsame passage\tlast one\n"
    path.write_text("anchor\tpositive\tneg\n" + rows * 2)
    task = retrieval_input.load_retrieval_task(
        {"train_file": str(path), "negatives": ("neg",), "max_query_length": 8, "max_seq_length": 6}
    )
    dataset, info = retrieval_input.make_retrieval_dataset(
        task, tokenizer, split="train", batch_size=4, seed=0, num_epochs=1
    )
    (batch,) = list(dataset.as_numpy_iterator())
    assert info.num_batches == 1
    assert batch["query_ids"].shape == (4, 8) and batch["passage_ids"].shape == (4, 12)
    passages = batch["passage_ids"].reshape(4, 2, 6)
    assert (passages[:, :, 0] == CLS).all()
    assert ((passages == SEP).sum(axis=2) == 1).all()
    # "same passage" is every row's positive: one key; the negatives differ from it.
    assert len(set(batch["passage_keys"][:, 0])) == 1
    assert not set(batch["passage_keys"][:, 1]) & set(batch["passage_keys"][:, 0])
    assert sorted(batch["query_key"]) == [0, 0, 1, 1]


def test_evaluation_batches_hold_every_query_and_passage_once(tmp_path, tokenizer):
    task = retrieval_input.load_retrieval_task({"beir_dir": str(write_beir(tmp_path))})
    dataset, info = retrieval_input.make_retrieval_dataset(
        task, tokenizer, split="eval", batch_size=16
    )
    batches = list(dataset.as_numpy_iterator())
    queries = np.concatenate([b["query_index"] for b in batches])
    passages = np.concatenate([b["passage_index"] for b in batches])
    assert sorted(queries[queries >= 0]) == list(range(10))
    assert sorted(passages[passages >= 0]) == list(range(40))
    assert info.num_batches == 3


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: write(d / "queries.jsonl", '{"_id": "q1", "text": "  "}\n'), "empty text"),
        (
            lambda d: write(d / "corpus.jsonl", '{"_id": "d0", "text": "a"}\n' * 2),
            "line 2: duplicate _id 'd0'",
        ),
        (
            lambda d: write(d / "qrels" / "dev.tsv", "query-id\tcorpus-id\tscore\nq1\tnope\t1\n"),
            "dev.tsv: line 2: 'nope' is not in corpus",
        ),
        (
            lambda d: write(d / "qrels" / "dev.tsv", "query-id\tcorpus-id\tscore\nq99\td1\t1\n"),
            "'q99' is not in queries.jsonl",
        ),
        (lambda d: write(d / "qrels" / "dev.tsv", "query-id\tdoc\n"), "no column 'corpus-id'"),
    ],
)
def test_a_bad_beir_directory_names_the_file_and_line(tmp_path, change, message):
    change(write_beir(tmp_path))
    with pytest.raises(TaskDataError, match=message):
        retrieval_input.load_retrieval_task({"beir_dir": str(tmp_path)})


def test_a_bad_pair_file_or_option_is_named(tmp_path):
    path = write(tmp_path / "p.tsv", "anchor\tpositive\nq\t\n")
    with pytest.raises(TaskDataError, match="p.tsv: line 2: 'positive' is empty"):
        retrieval_input.load_retrieval_task({"train_file": str(path)})
    with pytest.raises(TaskDataError, match="no column 'neg'"):
        retrieval_input.load_retrieval_task({"train_file": str(path), "negatives": ("neg",)})
    with pytest.raises(ConfigError, match="config.data.beir_dir=''"):
        retrieval_input.load_retrieval_task({})
    with pytest.raises(ConfigError, match="each column once"):
        retrieval_config.from_config({"train_file": str(path), "negatives": ("anchor",)})


def pair_rows(tmp_path, rows):
    path = tmp_path / "pairs.tsv"
    path.write_text("anchor\tpositive\tneg\n" + "".join(f"{q}\t{p}\t{n}\n" for q, p, n in rows))
    return str(path)


def host_batches(task, tokenizer, seed, process_index):
    dataset, _ = retrieval_input.make_retrieval_dataset(
        task, tokenizer, split="train", batch_size=2, seed=seed, num_epochs=1,
        process_index=process_index, process_count=2,
    )  # fmt: skip
    return list(dataset.as_numpy_iterator())


def test_a_global_batch_is_padded_to_the_shortest_bucket_holding_its_longest_text(
    tmp_path, tokenizer
):
    long = " ".join(["word"] * 40)
    # 3 global batches of 4 pairs: at least one without the long passages.
    rows = [("short query", "a short passage", "another")] * 10 + [("q", long, "n")] * 2
    config = {"train_file": pair_rows(tmp_path, rows), "negatives": ("neg",)}
    config |= {"max_query_length": 32, "max_seq_length": 64}
    task = retrieval_input.load_retrieval_task(config)
    full = retrieval_input.load_retrieval_task({**config, "length_buckets": 1})
    shapes = set()
    first, second = (host_batches(task, tokenizer, 0, index) for index in (0, 1))
    padded = host_batches(full, tokenizer, 0, 0)
    for one, other, wide in zip(first, second, padded, strict=True):
        # Two processes of a global batch pad alike, whichever holds a long passage.
        assert one["query_ids"].shape == other["query_ids"].shape
        assert one["passage_ids"].shape == other["passage_ids"].shape
        query_length, passage_length = one["query_ids"].shape[1], one["passage_ids"].shape[1]
        passage_length //= 2
        shapes.add((query_length, passage_length))
        # The same tokens as at the maximum lengths, less padding only.
        np.testing.assert_array_equal(one["query_ids"], wide["query_ids"][:, :query_length])
        passages = wide["passage_ids"].reshape(2, 2, 64)
        np.testing.assert_array_equal(
            one["passage_ids"].reshape(2, 2, passage_length), passages[:, :, :passage_length]
        )
        assert not passages[:, :, passage_length:].any()
    # Queries fit 8 of (8, 16, 32) tokens; passages of (16, 32, 64): the long one (42) 64.
    assert shapes == {(8, 16), (8, 64)}


def test_evaluation_rows_hold_as_many_passages_as_training_rows(tmp_path, tokenizer):
    rows = [(f"query {i}", f"passage {i}", f"other {i}") for i in range(5)]
    path = pair_rows(tmp_path, rows)
    task = retrieval_input.load_retrieval_task(
        {"train_file": path, "eval_file": path, "negatives": ("neg",), "max_seq_length": 16}
    )
    assert len(task.eval.passages) == 10
    dataset, info = retrieval_input.make_retrieval_dataset(
        task, tokenizer, split="eval", batch_size=4
    )
    batches = list(dataset.as_numpy_iterator())
    assert info.num_batches == 2  # 5 queries and 10 passages, two a row: 5 rows
    query_index = np.concatenate([b["query_index"] for b in batches])
    passage_index = np.concatenate([b["passage_index"] for b in batches])
    assert query_index.tolist() == [0, 1, 2, 3, 4, -1, -1, -1]
    assert passage_index.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]] + [[-1, -1]] * 3
    assert batches[0]["passage_ids"].shape == (4, 2 * 8)


def mined_file(path, scored: bool = True, count: int = 2):
    """Each train query i of write_beir's collection with the next `count` passages as
    negatives; scored: the scorer gives its positive 10 i and the negatives 0, 1, ..."""
    lines = []
    for i in range(30):
        line = {"query_id": f"q{i}", "negatives": [f"d{i + 1 + k}" for k in range(count)]}
        if scored:
            line |= {"scorer_scores": list(range(count)), "scorer_positives": {f"d{i}": 10.0 * i}}
        lines.append(line)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_a_negatives_file_gives_each_pair_its_querys_negatives_and_scorer_margins(
    tmp_path, tokenizer
):
    directory = write_beir(tmp_path / "beir")
    config = {
        "beir_dir": str(directory), "negatives_file": mined_file(tmp_path / "n.jsonl"),
        "num_negatives": 2, "eval_split": "", "max_query_length": 8, "max_seq_length": 16,
    }  # fmt: skip
    task = retrieval_input.load_retrieval_task(config, margins=True)
    corpus, queries = retrieval_input.read_beir(str(directory))
    assert task.train.queries[4] == queries["q4"]
    assert task.train.passages[4] == [corpus["d4"], corpus["d5"], corpus["d6"]]
    np.testing.assert_array_equal(task.train.margins[4], [40.0, 39.0])
    dataset, _ = retrieval_input.make_retrieval_dataset(
        task, tokenizer, split="train", batch_size=30, seed=0, num_epochs=1
    )
    (batch,) = list(dataset.as_numpy_iterator())
    assert batch["passage_ids"].shape == (30, 3 * 16)
    # Each row's margins are its query's: query_key numbers the distinct texts in order.
    by_text = sorted((queries[f"q{i}"], i) for i in range(30))
    query = [by_text[key][1] for key in batch["query_key"]]
    np.testing.assert_array_equal(batch["teacher_margins"][:, 0], [10.0 * i for i in query])
    # Without margins asked for, the batch has none.
    plain = retrieval_input.load_retrieval_task(config)
    assert plain.train.margins is None and len(plain.train.passages[0]) == 3


def test_margins_of_a_pair_file_are_its_columns_read_as_numbers(tmp_path):
    path = write(
        tmp_path / "p.jsonl",
        json.dumps({"anchor": "q", "positive": "p", "neg": "n", "m": 2.5}) + "\n",
    )
    config = {"train_file": str(path), "negatives": ("neg",), "margins": ("m",)}
    task = retrieval_input.load_retrieval_task(config, margins=True)
    np.testing.assert_array_equal(task.train.margins, [[2.5]])
    path.write_text(json.dumps({"anchor": "q", "positive": "p", "neg": "n", "m": "high"}) + "\n")
    with pytest.raises(TaskDataError, match="p.jsonl: line 1: 'm' is 'high', not a finite number"):
        retrieval_input.load_retrieval_task(config, margins=True)


def test_margin_options_that_cannot_be_read_are_refused(tmp_path):
    directory = str(write_beir(tmp_path / "beir"))
    unscored = mined_file(tmp_path / "unscored.jsonl", scored=False)
    cases = [
        ({"beir_dir": directory}, True, ConfigError, "negatives_file='': Margin-MSE reads"),
        ({"beir_dir": directory, "negatives_file": unscored}, True, TaskDataError,
         "query 'q0' has no scorer scores; Margin-MSE reads them: mine with --scorer"),
        ({"beir_dir": directory, "negatives_file": unscored, "num_negatives": 3}, False,
         TaskDataError, "query 'q0' has 2 negatives, fewer than num_negatives=3"),
        ({"train_file": "p.tsv", "negatives": ("n",)}, True, ConfigError,
         "margins=\\(\\): Margin-MSE reads a teacher's margin per negatives column"),
        ({"train_file": "p.tsv", "negatives": ("n",), "margins": ("a", "b")}, False, ConfigError,
         "one column per negatives column"),
        ({"train_file": "p.tsv", "negatives_file": unscored}, False, ConfigError,
         "negatives by passage id need beir_dir's collection"),
    ]  # fmt: skip
    for options, margins, error, message in cases:
        with pytest.raises(error, match=message):
            retrieval_input.load_retrieval_task(options, margins=margins)


def test_texts_without_pairs_are_laid_two_to_a_row_and_cut_as_passages(tmp_path, tokenizer):
    lines = ["first text", "", "second text here", "third"]
    path = write(tmp_path / "texts.txt", "\n".join(lines) + "\n")
    task = retrieval_input.load_retrieval_task({"texts": str(path), "max_seq_length": 8})
    # An odd count's last row repeats the first text; blank lines are skipped.
    assert task.train.queries == ["first text", "third"]
    assert task.train.passages == [["second text here"], ["first text"]]
    assert task.eval is None and task.config.passages_per_row == 1
    dataset, _ = retrieval_input.make_retrieval_dataset(
        task, tokenizer, split="train", batch_size=2, seed=0, num_epochs=1
    )
    (batch,) = list(dataset.as_numpy_iterator())
    # Both slots at a bucket of max_seq_length (8), not of max_query_length (64).
    assert batch["query_ids"].shape[1] == batch["passage_ids"].shape[1] <= 8
    jsonl = write(tmp_path / "texts.jsonl", '{"text": "one"}\n{"text": "two"}\n')
    assert retrieval_input.load_retrieval_task({"texts": str(jsonl)}).train.queries == ["one"]


def test_the_collections_texts_are_its_passages_and_train_queries(tmp_path):
    directory = str(write_beir(tmp_path / "beir"))
    task = retrieval_input.load_retrieval_task({"beir_dir": directory, "texts": "collection"})
    rows = zip(task.train.queries, task.train.passages, strict=True)
    texts = [text for query, passages in rows for text in (query, *passages)]
    assert len(texts) == 30 + 40  # the train split's queries, then every passage
    assert texts[0] == "where is zorax 0" and texts[30].startswith("Item 0 the zorax")
    assert len(task.eval.query_ids) == 10  # evaluated on eval_split as before
    assert retrieval_input.train_files(task.config)[-1].endswith("train.tsv")


def test_bad_texts_options_are_refused(tmp_path):
    directory = str(write_beir(tmp_path / "beir"))
    empty = write(tmp_path / "empty.txt", "\n  \n")
    cases = [
        ({"texts": "collection"}, ConfigError, "texts='collection': the collection's texts need"),
        ({"texts": "notes.md"}, ConfigError, "'collection' or a file of texts: .txt, .tsv"),
        ({"beir_dir": directory, "texts": "t.txt", "negatives_file": "n.jsonl"}, ConfigError,
         "negatives_file='n.jsonl': texts \\('t.txt'\\) replace the training pairs"),
        ({"texts": "t.txt", "train_file": "p.tsv"}, ConfigError, "drop train_file"),
        ({"texts": str(empty)}, TaskDataError, "empty.txt \\(config.data.texts\\): no texts"),
        ({"texts": str(tmp_path / "missing.txt")}, TaskDataError, "missing.txt .*cannot read"),
    ]  # fmt: skip
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            retrieval_input.load_retrieval_task(options)
