"""Classification data: readers, label sets, [CLS] A [SEP] B [SEP] encoding, batching, errors."""

import itertools

import numpy as np
import pytest
import support
import tensorflow as tf
import tensorflow_datasets as tfds

from data_pipeline.errors import ConfigError
from data_pipeline.finetune import classification_config, classification_input
from data_pipeline.finetune.classification_config import ClassificationConfig
from data_pipeline.finetune.glue_sample import write as write_glue_dir
from data_pipeline.finetune.records import SplitInfo, TaskDataError

TESTDATA = support.TESTDATA / "finetune"
MRPC_COLUMNS = dict(text_a="#1 String", text_b="#2 String", label="Quality")
CLS, SEP, PAD = 101, 102, 0


def mrpc_files(**changes) -> ClassificationConfig:
    options = dict(
        train_file=str(TESTDATA / "mrpc_train.tsv"),
        eval_file=str(TESTDATA / "mrpc_dev.tsv"),
        **MRPC_COLUMNS,
    )
    return ClassificationConfig(**{**options, **changes})


def batches(dataset) -> list[dict]:
    return list(dataset.as_numpy_iterator())


def encode(tokenizer, pairs, max_seq_length):
    out = classification_input.encode_texts(
        tokenizer,
        tf.constant([a for a, _ in pairs]),
        tf.constant([b for _, b in pairs]),
        max_seq_length=max_seq_length,
        cls_id=CLS,
        sep_id=SEP,
        pad_id=PAD,
    )
    return {name: value.numpy() for name, value in out.items()}


# ----------------------------------------------------------------------------- encoding


def _original_truncation(len_a, len_b, max_length):
    """run_classifier.py's _truncate_seq_pair, on lengths."""
    while len_a + len_b > max_length:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_truncated_lengths_match_the_original_loop():
    grid = list(itertools.product(range(9), range(9), range(1, 12)))
    len_a, len_b, budget = (tf.constant(column, tf.int32) for column in zip(*grid, strict=True))
    keep_a, keep_b = classification_input.truncated_lengths(len_a, len_b, budget)
    expected = [_original_truncation(*row) for row in grid]
    assert list(zip(keep_a.numpy().tolist(), keep_b.numpy().tolist(), strict=True)) == expected


def test_pair_layout_exact_ids(tokenizer):
    out = encode(
        tokenizer,
        [
            (
                "The council approved the new budget on Tuesday.",
                "On Tuesday the council passed the new budget.",
            )
        ],
        max_seq_length=24,
    )
    # the council approved the new budget on tuesday . / on tuesday the council passed ...
    a = [1996, 2473, 4844, 1996, 2047, 5166, 2006, 9857, 1012]
    b = [2006, 9857, 1996, 2473, 2979, 1996, 2047, 5166, 1012]
    np.testing.assert_array_equal(out["input_ids"][0], [CLS, *a, SEP, *b, SEP, 0, 0, 0])
    np.testing.assert_array_equal(out["segment_ids"][0], [0] * 11 + [1] * 10 + [0] * 3)
    np.testing.assert_array_equal(out["input_mask"][0], [1] * 21 + [0] * 3)


def test_truncation_pops_the_end_of_the_longer_text(tokenizer):
    out = encode(
        tokenizer,
        [
            ("The council approved the new budget on Tuesday.", "the new budget"),
            ("the new budget", "On Tuesday the council passed the new budget."),
        ],
        max_seq_length=11,
    )
    # 8 tokens for A and B: A (9) and B (3) -> 5 and 3; A (3) and B (9) -> 3 and 5.
    np.testing.assert_array_equal(
        out["input_ids"][0], [CLS, 1996, 2473, 4844, 1996, 2047, SEP, 1996, 2047, 5166, SEP]
    )
    np.testing.assert_array_equal(out["segment_ids"][0], [0] * 7 + [1] * 4)
    np.testing.assert_array_equal(
        out["input_ids"][1], [CLS, 1996, 2047, 5166, SEP, 2006, 9857, 1996, 2473, 2979, SEP]
    )
    # Equal lengths: B loses first (4 + 4 for 9 + 9 -> 4 and 4, after B gave its fifth).
    out = encode(
        tokenizer,
        [
            (
                "The council approved the new budget on Tuesday.",
                "On Tuesday the council passed the new budget.",
            )
        ],
        max_seq_length=12,
    )
    np.testing.assert_array_equal(
        out["input_ids"][0], [CLS, 1996, 2473, 4844, 1996, 2047, SEP, 2006, 9857, 1996, 2473, SEP]
    )


def test_single_sentence_layout(tokenizer):
    out = encode(tokenizer, [("The council approved the new budget on Tuesday.", "")], 8)
    np.testing.assert_array_equal(
        out["input_ids"][0], [CLS, 1996, 2473, 4844, 1996, 2047, 5166, SEP]
    )
    np.testing.assert_array_equal(out["segment_ids"][0], [0] * 8)
    np.testing.assert_array_equal(out["input_mask"][0], [1] * 8)


# ----------------------------------------------------------------------------- readers


def test_tsv_in_mrpc_layout():
    task = classification_input.load_classification_task(mrpc_files())
    assert task.label_names == ("0", "1")
    assert task.metrics == ("accuracy",)
    assert task.name == "mrpc_train"
    assert len(task.train) == 4 and len(task.eval) == 3
    np.testing.assert_array_equal(task.train.labels, [1, 0, 1, 0])
    # No quoting in TSV: the quotes are part of the text.
    assert task.train.text_a[3] == 'He said the bridge "needs urgent repairs".'
    assert task.eval.text_b[0] == "An hour-long delay hit the coastal train."


def test_csv_with_quoted_commas():
    config = ClassificationConfig(
        train_file=str(TESTDATA / "reviews.csv"),
        text_a="sentence",
        metrics=("accuracy", "f1"),
    )
    task = classification_input.load_classification_task(config)
    assert task.eval is None
    assert task.label_names == ("negative", "positive")
    assert task.metrics == ("accuracy", "f1")
    assert list(task.train.text_a[[0, 3]]) == [
        "Warm, friendly staff and a quiet room.",
        'They said "fully booked", then found us a table.',
    ]
    assert list(task.train.text_b) == [""] * 5
    np.testing.assert_array_equal(task.train.labels, [1, 0, 1, 1, 0])


def test_jsonl_skips_blank_lines():
    path = str(TESTDATA / "nli.jsonl")
    task = classification_input.load_classification_task(
        {"train_file": path, "eval_file": path, "text_b": "text_b"}
    )
    assert task.label_names == ("contradiction", "entailment", "neutral")
    assert task.num_labels == 3
    np.testing.assert_array_equal(task.eval.labels, [1, 0, 2, 1])
    assert task.train.text_a[2] == "A woman reads a newspaper at a café."
    assert task.train.text_b[2] == "She is waiting for a friend."


def test_one_text_column_by_default(tmp_path):
    path = tmp_path / "single.csv"
    path.write_text("text_a,label\ngood,pos\nbad,neg\n")
    data = classification_config.default_config()
    data.train_file = str(path)
    task = classification_input.load_classification_task(data)
    assert list(task.train.text_a) == ["good", "bad"]
    assert list(task.train.text_b) == ["", ""]
    assert classification_input.read_texts(data, str(path)) == (["good", "bad"], ["", ""])


def test_integer_labels_sort_numerically_and_regression(tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_text(
        "".join(
            f'{{"text_a": "t{i}", "text_b": null, "label": {label}}}\n'
            for i, label in enumerate([10, 2, 1, 2])
        )
    )
    task = classification_input.load_classification_task({"train_file": str(path)})
    assert task.label_names == ("1", "2", "10")
    np.testing.assert_array_equal(task.train.labels, [2, 1, 0, 1])
    task = classification_input.load_classification_task(
        {"train_file": str(path), "is_regression": True}
    )
    assert task.is_regression and task.num_labels == 1
    assert task.metrics == ("pearson", "spearman")
    assert task.train.labels.dtype == np.float32
    np.testing.assert_array_equal(task.train.labels, [10.0, 2.0, 1.0, 2.0])


def test_label_names_option_fixes_the_order():
    task = classification_input.load_classification_task(mrpc_files(label_names=("1", "0")))
    np.testing.assert_array_equal(task.train.labels, [0, 1, 0, 1])


# ----------------------------------------------------------------------------- batches


def test_train_and_eval_batches(tokenizer):
    task = classification_input.load_classification_task(mrpc_files(max_seq_length=32))
    train, info = classification_input.make_classification_dataset(
        task, tokenizer, split="train", batch_size=2, seed=3, num_epochs=3
    )
    assert info == SplitInfo(num_examples=4, global_batch_size=2, num_batches=6)
    got = batches(train)
    assert len(got) == 6
    first = got[0]
    assert {k: (v.dtype, v.shape) for k, v in first.items()} == {
        "input_ids": (np.int32, (2, 32)),
        "input_mask": (np.int32, (2, 32)),
        "segment_ids": (np.int32, (2, 32)),
        "label": (np.int32, (2,)),
        "example_weight": (np.float32, (2,)),
        "stream_position": (np.int64, (2, 1)),
    }
    assert all(b["example_weight"].tolist() == [1.0, 1.0] for b in got)
    # Every epoch sees every example once; the same seed gives the same order.
    epoch_ids = [tuple(row) for b in got[:2] for row in b["input_ids"].tolist()]
    assert len(set(epoch_ids)) == 4
    again, _ = classification_input.make_classification_dataset(
        task, tokenizer, split="train", batch_size=2, seed=3, num_epochs=3
    )
    for x, y in zip(got, batches(again), strict=True):
        np.testing.assert_array_equal(x["input_ids"], y["input_ids"])

    evals, info = classification_input.make_classification_dataset(
        task, tokenizer, split="eval", batch_size=2
    )
    assert info.num_batches == 2
    got = batches(evals)
    assert [b["example_weight"].tolist() for b in got] == [[1.0, 1.0], [1.0, 0.0]]
    assert [b["label"].tolist() for b in got] == [[1, 0], [1, 1]]  # padding copies example 0
    # [CLS] the train to the coast ...
    assert got[0]["input_ids"][0, :3].tolist() == [CLS, 1996, 3345]


# ----------------------------------------------------------------------------- GLUE (mocked TFDS)


def test_glue_mrpc(tokenizer):
    with tfds.testing.mock_data(num_examples=5):
        task = classification_input.load_classification_task(
            {"source": "glue", "glue_task": "mrpc"}
        )
    assert task.label_names == ("not_equivalent", "equivalent")
    assert task.metrics == ("accuracy", "f1")
    assert len(task.train) == 5 and len(task.eval) == 5
    assert task.train.source == "tfds:glue/mrpc:train"
    assert all(b for b in task.train.text_b)
    dataset, info = classification_input.make_classification_dataset(
        task, tokenizer, split="eval", batch_size=4
    )
    got = batches(dataset)
    assert info.num_batches == 2
    assert got[1]["example_weight"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert got[0]["segment_ids"].max() == 1


def test_glue_stsb_is_regression(tokenizer):
    with tfds.testing.mock_data(num_examples=3):
        task = classification_input.load_classification_task(
            {"source": "glue", "glue_task": "stsb"}
        )
    assert task.is_regression and task.metrics == ("pearson", "spearman")
    dataset, _ = classification_input.make_classification_dataset(
        task, tokenizer, split="eval", batch_size=3
    )
    (batch,) = batches(dataset)
    assert batch["label"].dtype == np.float32
    np.testing.assert_allclose(batch["label"], task.eval.labels)


def test_glue_mnli_mismatched_and_single_sentence_tasks():
    with tfds.testing.mock_data(num_examples=2):
        task = classification_input.load_classification_task(
            {"source": "glue", "glue_task": "mnli", "eval_split": "validation_mismatched"}
        )
        assert task.eval.source == "tfds:glue/mnli:validation_mismatched"
        assert task.label_names == ("entailment", "neutral", "contradiction")
        cola = classification_input.load_classification_task(
            {"source": "glue", "glue_task": "cola"}
        )
    assert list(cola.train.text_b) == ["", ""]
    assert cola.metrics == ("matthews_corrcoef",)


def test_glue_table_matches_the_tfds_builder():
    for name, task in classification_config.GLUE_TASKS.items():
        features = tfds.builder(f"glue/{name}").info.features
        assert {task.text_a, task.text_b} - {None} == set(features) - {"label", "idx"}, name
        assert tuple(getattr(features["label"], "names", ())) == task.label_names, name


def test_glue_not_prepared(tmp_path):
    with pytest.raises(TaskDataError, match=r"glue/rte.*split 'train'.*tfds build"):
        classification_input.load_classification_task(
            {"source": "glue", "glue_task": "rte", "tfds_data_dir": str(tmp_path)}
        )


# ----------------------------------------------------------------------------- GLUE's download


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    return write_glue_dir(str(tmp_path_factory.mktemp("glue")))


def test_glue_read_from_the_download_layout_gives_the_tfds_labels_and_splits(glue_dir):
    mnli = classification_input.load_classification_task(
        {"source": "glue", "glue_task": "mnli", "glue_dir": glue_dir,
         "eval_split": "validation_mismatched"}
    )  # fmt: skip
    assert mnli.train.source == f"{glue_dir}/MNLI/train.tsv"
    assert mnli.eval.source == f"{glue_dir}/MNLI/dev_mismatched.tsv"
    assert mnli.label_names == ("entailment", "neutral", "contradiction")
    assert mnli.train.labels.tolist()[:3] == [0, 1, 2]
    cola = classification_input.load_classification_task(
        {"source": "glue", "glue_task": "cola", "glue_dir": glue_dir}
    )
    assert cola.eval.source == f"{glue_dir}/CoLA/dev.tsv"
    assert list(cola.train.text_b) == [""] * 8
    assert cola.metrics == ("matthews_corrcoef",)
    stsb = classification_input.load_classification_task(
        {"source": "glue", "glue_task": "stsb", "glue_dir": glue_dir}
    )
    assert stsb.is_regression and stsb.train.labels.dtype == np.float32


def test_glue_dir_missing_a_file_is_one_line_and_only_for_source_glue(glue_dir, tmp_path):
    (tmp_path / "nothing").mkdir()
    with pytest.raises(TaskDataError, match=r"/nothing/RTE: missing, for the task rte; the GLUE"):
        classification_input.load_classification_task(
            {"source": "glue", "glue_task": "rte", "glue_dir": str(tmp_path / "nothing")}
        )
    with pytest.raises(ConfigError, match=r"config.data.glue_dir.*is for source='glue'"):
        classification_config.from_config({"train_file": "a.tsv", "glue_dir": glue_dir})


# ----------------------------------------------------------------------------- bad input


def write(tmp_path, name, content) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def test_missing_file():
    with pytest.raises(TaskDataError, match=r"nope\.tsv \(config\.data\.train_file\): cannot read"):
        classification_input.load_classification_task({"train_file": "/no/such/nope.tsv"})


def test_missing_column_names_the_columns_found():
    with pytest.raises(
        TaskDataError, match=r"no column 'text_a' \(config\.data\.text_a\).*'#1 String'"
    ):
        classification_input.load_classification_task(
            {"train_file": str(TESTDATA / "mrpc_train.tsv")}
        )


def test_missing_jsonl_key(tmp_path):
    path = write(tmp_path, "a.jsonl", '{"text_a": "x", "label": "y"}\n')
    with pytest.raises(
        TaskDataError, match=r"a\.jsonl: line 1: no key 'text_b'.*\['label', 'text_a'\]"
    ):
        classification_input.load_classification_task({"train_file": path, "text_b": "text_b"})


def test_eval_label_not_in_training_labels(tmp_path):
    dev = write(
        tmp_path,
        "dev.tsv",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n\n2\t3\t4\tc\td\n",
    )
    with pytest.raises(
        TaskDataError,
        match=r"dev\.tsv: line 4: label '2' is not in the label set \['0', '1'\] \(from .*mrpc_train\.tsv\)",
    ):
        classification_input.load_classification_task(mrpc_files(eval_file=dev))


def test_empty_split(tmp_path):
    header_only = write(tmp_path, "empty.csv", "text_a,text_b,label\n\n")
    with pytest.raises(TaskDataError, match=r"empty\.csv \(config\.data\.eval_file\): no examples"):
        classification_input.load_classification_task(
            {"eval_file": header_only, "label_names": ["a", "b"]}
        )
    nothing = write(tmp_path, "nothing.tsv", "")
    with pytest.raises(TaskDataError, match=r"nothing\.tsv: empty file"):
        classification_input.load_classification_task({"train_file": nothing})


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.csv", b"text_a,text_b,label\nok,fine,x\nbad \xff here,y,z\n")
    with pytest.raises(
        TaskDataError, match=r"bad\.csv \(config\.data\.train_file\): line 3 is not valid UTF-8"
    ):
        classification_input.load_classification_task({"train_file": path})


def test_malformed_jsonl_line(tmp_path):
    path = write(
        tmp_path, "bad.jsonl", '{"text_a": "a", "text_b": "b", "label": "x"}\n{"text_a": "a",\n'
    )
    with pytest.raises(TaskDataError, match=r"bad\.jsonl: line 2 is not valid JSON"):
        classification_input.load_classification_task({"train_file": path})
    path = write(tmp_path, "list.jsonl", '["a", "b"]\n')
    with pytest.raises(TaskDataError, match=r"list\.jsonl: line 1 is not a JSON object"):
        classification_input.load_classification_task({"train_file": path})


def test_bad_rows(tmp_path):
    fields = write(tmp_path, "f.tsv", "text_a\ttext_b\tlabel\na\tb\tx\na\tb\n")
    with pytest.raises(TaskDataError, match=r"f\.tsv: line 3 has 2 fields; the header has 3"):
        classification_input.load_classification_task({"train_file": fields})
    empty_label = write(tmp_path, "e.csv", "text_a,text_b,label\na,b,x\nc,d, \n")
    with pytest.raises(TaskDataError, match=r"e\.csv: line 3: empty label"):
        classification_input.load_classification_task({"train_file": empty_label})
    score = write(tmp_path, "s.csv", "text_a,text_b,label\na,b,0.5\nc,d,high\n")
    with pytest.raises(
        TaskDataError, match=r"s\.csv: line 3: 'label' is 'high', not a finite number"
    ):
        classification_input.load_classification_task({"train_file": score, "is_regression": True})
    one_label = write(tmp_path, "one.csv", "text_a,text_b,label\na,b,x\nc,d,x\n")
    with pytest.raises(TaskDataError, match=r"one\.csv: every example has the label 'x'"):
        classification_input.load_classification_task({"train_file": one_label})
    typed = write(tmp_path, "t.jsonl", '{"text_a": 3, "text_b": "b", "label": "x"}\n')
    with pytest.raises(TaskDataError, match=r"t\.jsonl: line 1: 'text_a' is int 3, not text"):
        classification_input.load_classification_task({"train_file": typed})


def test_config_errors():
    with pytest.raises(ConfigError, match=r"config\.data\.train_file='x\.txt': the extension"):
        ClassificationConfig(train_file="x.txt")
    with pytest.raises(ConfigError, match=r"unknown config key: config\.data\.text_column; known"):
        classification_config.from_config({"text_column": "x"})
    with pytest.raises(ConfigError, match=r"config\.data\.glue_task='mnli_matched'"):
        ClassificationConfig(source="glue", glue_task="mnli_matched")
    with pytest.raises(
        ConfigError, match=r"config\.data\.eval_split='validation'.*validation_matched"
    ):
        ClassificationConfig(source="glue", glue_task="mnli", eval_split="validation")
    with pytest.raises(ConfigError, match=r"config\.data\.is_regression=True: glue/sst2"):
        ClassificationConfig(source="glue", glue_task="sst2", is_regression=True)
    with pytest.raises(
        ConfigError, match=r"config\.data\.label_names=\(\).*label set must be given"
    ):
        ClassificationConfig(eval_file="dev.tsv")
    with pytest.raises(
        ConfigError, match=r"config\.data\.metrics=\('f1',\): f1 needs two labels; there are 3"
    ):
        classification_input.load_classification_task(
            {"train_file": str(TESTDATA / "nli.jsonl"), "metrics": ["f1"]}
        )
    task = classification_input.load_classification_task(mrpc_files(eval_file=""))
    with pytest.raises(ConfigError, match=r"config\.data\.eval_file=''"):
        classification_input.make_classification_dataset(task, None, split="eval", batch_size=2)


@pytest.mark.parametrize(
    "task, split, source",
    [
        ("mnli", "test_mismatched", "tfds:glue/mnli:test_mismatched"),
        ("ax", "diagnostic", "tfds:glue/ax:test"),
        ("qqp", "test", "tfds:glue/qqp:test"),
        ("stsb", "dev", "tfds:glue/stsb:validation"),
        ("cola", "train", "tfds:glue/cola:train"),
    ],
)
def test_a_glue_split_by_its_file_name_from_tfds(task, split, source):
    with tfds.testing.mock_data(num_examples=3):
        data = classification_input.read_glue_split("", "", task, split)
    assert data.source == source and len(data.text_a) == 3
    if split in ("test_mismatched", "diagnostic", "test"):
        # Test sets: their index (TFDS's idx), by which the server matches predictions.
        assert data.labels is None and all(isinstance(i, str) for i in data.index)
    else:
        assert data.index is None and len(data.labels) == 3
        assert data.labels.dtype == (np.float32 if task == "stsb" else np.int32)
    assert all(b == "" for b in data.text_b) == (task == "cola")


def test_a_glue_split_by_its_file_name_from_the_download(glue_dir):
    config = (glue_dir, "")
    test = classification_input.read_glue_split(*config, "qqp", "test")
    assert test.source == f"{glue_dir}/QQP/test.tsv" and test.labels is None
    dev = classification_input.read_glue_split(*config, "mnli", "dev_mismatched")
    assert dev.index is None and set(dev.labels) <= {0, 1, 2}
    with pytest.raises(TaskDataError, match=r"RTE/dev_matched.tsv: missing, for the task rte"):
        classification_input.read_glue_split(*config, "rte", "dev_matched")
