"""Tagging data: CoNLL reader, first-piece labels, windows, mapping back to words, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import support
import tensorflow as tf
import tensorflow_datasets as tfds

from bertjax import losses
from bertjax.model import BertConfig, BertForTokenClassification
from bertjax.tasks import finetune
from data_pipeline.errors import ConfigError
from data_pipeline.finetune import tagging_config, tagging_input
from data_pipeline.finetune.records import SplitInfo, TaskDataError

TESTDATA = support.TESTDATA / "finetune"
TRAIN, DEV = str(TESTDATA / "ner_train.txt"), str(TESTDATA / "ner_dev.txt")
CLS, SEP = 101, 102
NER_LABELS = ("B-LOC", "B-ORG", "B-PER", "I-ORG", "I-PER", "O")


def load(**options) -> tagging_input.TaggingTask:
    return tagging_input.load_tagging_task({"train_file": TRAIN, "eval_file": DEV, **options})


def sentences(*words_and_tags) -> tagging_input.Sentences:
    return tagging_input.Sentences(
        "test",
        tuple(tuple(words) for words, _ in words_and_tags),
        tuple(np.asarray(tags, np.int32) for _, tags in words_and_tags),
    )


def test_conll_reader():
    task = load()
    assert task.label_names == NER_LABELS
    assert task.name == "ner_train"
    assert len(task.train) == 3 and len(task.eval) == 2  # -DOCSTART- lines are skipped
    assert task.train.words[1] == ("Greenfield", "Analytics", "hired", "Tomasz", ".")
    np.testing.assert_array_equal(task.train.tags[1], [1, 3, 5, 2, 5])
    np.testing.assert_array_equal(task.eval.tags[1], [2, 5, 5, 5])


def test_tag_column_option():
    task = load(tag_column=1)  # the POS column
    assert task.label_names == (
        ".",
        "CC",
        "DT",
        "IN",
        "NN",
        "NNP",
        "NNPS",
        "NNS",
        "RB",
        "TO",
        "VBD",
    )
    assert task.train.words[0][0] == "Maria"


def test_first_piece_labels(tokenizer):
    # maria oliveira | greenfield | tomas ##z | super ##cal ##if ##rag ##ilis ##tic | .
    data = sentences(
        (["Maria", "Tomasz", "supercalifragilistic", "."], [2, 4, 5, 5]),
        (["Greenfield", "\u200b", "Lisbon"], [1, 5, 0]),
    )
    features, stats = tagging_input.encode_sentences(data, tokenizer, max_seq_length=14)
    assert stats == tagging_input.WindowStats(
        sentences=2, windows=2, split_sentences=0, truncated_words=0
    )
    np.testing.assert_array_equal(
        features["input_ids"][0],
        [CLS, 3814, 12675, 2480, 3565, 9289, 10128, 29181, 24411, 4588, 1012, SEP, 0, 0],
    )
    np.testing.assert_array_equal(features["input_mask"][0], [1] * 12 + [0] * 2)
    np.testing.assert_array_equal(
        features["label_ids"][0], [0, 2, 4, 0, 5, 0, 0, 0, 0, 0, 5, 0, 0, 0]
    )
    np.testing.assert_array_equal(
        features["label_weights"][0], [0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]
    )
    np.testing.assert_array_equal(
        features["word_index"][0], [-1, 0, 1, -1, 2, -1, -1, -1, -1, -1, 3, -1, -1, -1]
    )
    # A word with no pieces (a zero-width space) becomes [UNK] and keeps its label.
    np.testing.assert_array_equal(features["input_ids"][1, :5], [CLS, 26713, 100, 11929, SEP])
    np.testing.assert_array_equal(features["word_index"][1, :5], [-1, 0, 1, 2, -1])
    np.testing.assert_array_equal(features["label_ids"][1, :5], [0, 1, 5, 0, 0])
    np.testing.assert_array_equal(features["segment_ids"], 0)
    np.testing.assert_array_equal(features["sentence_id"], [0, 1])


def test_long_sentences_become_windows_and_map_back(tokenizer):
    data = sentences(
        (["Maria", "Tomasz", "supercalifragilistic", "Lisbon", "Tomasz", "."], [2, 4, 5, 0, 2, 5]),
        (["Greenfield"], [1]),
        (["supercalifragilistic", "Maria"], [5, 2]),
    )
    features, stats = tagging_input.encode_sentences(data, tokenizer, max_seq_length=6)
    # 4 pieces a window: [maria tomas ##z] [super ##cal ##if ##rag] [lisbon tomas ##z .]
    assert stats == tagging_input.WindowStats(
        sentences=3, windows=6, split_sentences=2, truncated_words=2
    )
    np.testing.assert_array_equal(features["sentence_id"], [0, 0, 0, 1, 2, 2])
    np.testing.assert_array_equal(features["input_ids"][1], [CLS, 3565, 9289, 10128, 29181, SEP])
    np.testing.assert_array_equal(features["word_index"][2], [-1, 3, 4, -1, 5, -1])
    # Predicting each first piece's label gives back every word's tag, whatever the row order.
    order = np.array([5, 2, 0, 4, 1, 3])
    tags = tagging_input.tags_from_predictions(
        features["label_ids"][order],
        features["word_index"][order],
        features["sentence_id"][order],
        data,
        NER_LABELS,
    )
    assert tags == [
        ["B-PER", "I-PER", "O", "B-LOC", "B-PER", "O"],
        ["B-ORG"],
        ["O", "B-PER"],
    ]
    with pytest.raises(ValueError, match=r"test: sentence 0, word 3 has no prediction"):
        tagging_input.tags_from_predictions(
            features["label_ids"][:2],
            features["word_index"][:2],
            features["sentence_id"][:2],
            data,
            NER_LABELS,
        )
    with pytest.raises(ValueError, match=r"sentence 1, word 0 is predicted twice"):
        tagging_input.tags_from_predictions(
            features["label_ids"][[0, 1, 2, 3, 3, 4, 5]],
            features["word_index"][[0, 1, 2, 3, 3, 4, 5]],
            features["sentence_id"][[0, 1, 2, 3, 3, 4, 5]],
            data,
            NER_LABELS,
        )


def test_train_and_eval_batches(tokenizer):
    task = load(max_seq_length=16)
    train, info = tagging_input.make_tagging_dataset(
        task, tokenizer, split="train", batch_size=2, seed=1, num_epochs=2
    )
    assert info == SplitInfo(num_examples=3, global_batch_size=2, num_batches=3)
    got = list(train.as_numpy_iterator())
    assert len(got) == 3
    assert {k: (v.dtype, v.shape) for k, v in got[0].items()} == {
        "input_ids": (np.int32, (2, 16)),
        "input_mask": (np.int32, (2, 16)),
        "segment_ids": (np.int32, (2, 16)),
        "label_ids": (np.int32, (2, 16)),
        "label_weights": (np.float32, (2, 16)),
        "word_index": (np.int32, (2, 16)),
        "sentence_id": (np.int32, (2,)),
        "example_weight": (np.float32, (2,)),
        "stream_position": (np.int64, (2, 1)),
    }

    evals, info = tagging_input.make_tagging_dataset(task, tokenizer, split="eval", batch_size=4)
    assert info == SplitInfo(num_examples=2, global_batch_size=4, num_batches=1)
    (batch,) = list(evals.as_numpy_iterator())
    assert batch["example_weight"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert batch["sentence_id"].tolist() == [0, 1, -1, -1]
    assert batch["label_weights"][2:].sum() == 0 and (batch["word_index"][2:] == -1).all()
    # oliveira visited greenfield in vienna . / tomas ##z stayed home .
    assert batch["input_ids"][1, :7].tolist() == [CLS, 12675, 2480, 4370, 2188, 1012, SEP]
    assert batch["label_weights"][1, :7].tolist() == [0, 1, 0, 1, 1, 1, 0]
    tags = tagging_input.tags_from_predictions(
        batch["label_ids"], batch["word_index"], batch["sentence_id"], task.eval, task.label_names
    )
    assert tags == [["B-PER", "O", "B-ORG", "O", "B-LOC", "O"], ["B-PER", "O", "O", "O"]]


# ----------------------------------------------------------------------------- packing

TOKEN_COLUMNS = ("input_ids", "segment_ids", "label_ids", "label_weights", "word_index")


def test_packed_batches_hold_the_same_windows_token_for_token(tokenizer):
    task = load(max_seq_length=32)
    for split, epochs in (("train", 4.0), ("eval", 1.0)):
        args = dict(split=split, batch_size=4, num_epochs=epochs)
        shape = tagging_input.packed_shape(task, tokenizer, **args)
        assert shape.rows < 4 and shape.slots > 1
        plain, _ = tagging_input.make_tagging_dataset(task, tokenizer, **args)
        packed, _ = tagging_input.make_tagging_dataset(task, tokenizer, **args, packed=shape)
        for a, b in zip(plain.as_numpy_iterator(), packed.as_numpy_iterator(), strict=True):
            assert b["input_ids"].shape == (shape.rows, 32)
            row, slot = np.divmod(b["example_slot"], shape.slots)
            for n in range(4):
                own = b["input_mask"][row[n]] == slot[n] + 1
                length = a["input_mask"][n].sum()
                for name in TOKEN_COLUMNS:
                    np.testing.assert_array_equal(b[name][row[n], own], a[name][n, :length])
                for name in ("sentence_id", "example_weight"):
                    assert b[name][row[n], slot[n]] == a[name][n]
            assert (b["word_index"][b["input_mask"] == 0] == -1).all()
            assert b["label_weights"].sum() == a["label_weights"].sum()
            if split == "train":
                np.testing.assert_array_equal(b["stream_position"], a["stream_position"])


TINY = BertConfig(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
INPUTS = ("input_ids", "input_mask", "segment_ids")


@pytest.mark.slow
def test_packed_windows_give_their_unpacked_logits_loss_and_tags(tokenizer):
    task = load(max_seq_length=32)
    args = dict(split="eval", batch_size=4)
    shape = tagging_input.packed_shape(task, tokenizer, **args)
    (a,) = tagging_input.make_tagging_dataset(task, tokenizer, **args)[0].as_numpy_iterator()
    (b,) = tagging_input.make_tagging_dataset(task, tokenizer, **args, packed=shape)[
        0
    ].as_numpy_iterator()
    model = BertForTokenClassification(TINY, num_labels=len(NER_LABELS))
    params = model.init(jax.random.key(0), *(a[k] for k in INPUTS), deterministic=True)
    expected = model.apply(params, *(a[k] for k in INPUTS), deterministic=True)
    got = model.apply(params, *(b[k] for k in INPUTS), deterministic=True)
    # Back to each window's own tokens, in the batch's order.
    unpacked, passed = finetune._outputs_and_bookkeeping(
        got, jax.tree.map(jnp.asarray, b), tagging_input.TOKEN_PADDING
    )
    real = a["input_mask"] > 0
    np.testing.assert_allclose(np.asarray(unpacked)[real], np.asarray(expected)[real], atol=2e-5)
    for name in ("label_ids", "label_weights", "word_index", "sentence_id", "example_weight"):
        np.testing.assert_array_equal(passed[name], a[name])
    tags = {
        packed: tagging_input.tags_from_predictions(
            np.argmax(logits, axis=-1), a["word_index"], a["sentence_id"], task.eval, NER_LABELS
        )
        for packed, logits in ((False, expected), (True, unpacked))
    }
    assert tags[True] == tags[False]
    plain_sums, packed_sums = losses.tagging_sums(expected, a), losses.tagging_sums(got, b)
    for key in plain_sums:
        np.testing.assert_allclose(packed_sums[key], plain_sums[key], rtol=1e-5)
    assert plain_sums["weight"] == np.sum(losses.token_weights(b)) == 10  # the dev words
    # Nothing attends across windows: another window's tokens change nothing here.
    row = int(np.flatnonzero(b["input_mask"].max(axis=1) >= 2)[0])
    changed = dict(b, input_ids=np.where(b["input_mask"] == 2, 1000, b["input_ids"]))
    after = model.apply(params, *(changed[k] for k in INPUTS), deterministic=True)
    first = b["input_mask"][row] == 1
    np.testing.assert_array_equal(after[row, first], got[row, first])
    assert not np.allclose(after[row, ~first], got[row, ~first])


# ----------------------------------------------------------------------------- TFDS (mocked)


def _conll2003_examples(examples):
    def as_dataset(self, split, *args, **kwargs):
        rows = examples[split]
        return tf.data.Dataset.from_generator(
            lambda: (
                {"tokens": words, "pos": [0] * len(tags), "chunks": [0] * len(tags), "ner": tags}
                for words, tags in rows
            ),
            output_signature={
                "tokens": tf.TensorSpec([None], tf.string),
                "pos": tf.TensorSpec([None], tf.int64),
                "chunks": tf.TensorSpec([None], tf.int64),
                "ner": tf.TensorSpec([None], tf.int64),
            },
        )

    return tfds.testing.mock_data(as_dataset_fn=as_dataset)


def test_tfds_conll2003(tokenizer):
    examples = {
        "train": [(["Maria", "flew", "to", "Lisbon"], [1, 0, 0, 5]), ([], [])],
        "dev": [(["Tomasz", "stayed"], [1, 0])],
    }
    with _conll2003_examples(examples):
        task = tagging_input.load_tagging_task({"source": "tfds"})
    assert task.label_names == (
        "O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"
    )  # fmt: skip
    assert len(task.train) == 1  # the empty example at the end of a file goes
    assert task.eval.source == "tfds:conll2003:dev"
    assert task.eval.words == (("Tomasz", "stayed"),)
    dataset, _ = tagging_input.make_tagging_dataset(task, tokenizer, split="eval", batch_size=1)
    (batch,) = list(dataset.as_numpy_iterator())
    assert batch["label_ids"][0, :4].tolist() == [0, 1, 0, 0]
    assert batch["label_weights"][0, :4].tolist() == [0, 1, 0, 1]


def test_tfds_words_and_tags_disagree():
    examples = {"train": [(["Maria", "flew"], [1])], "dev": [(["a"], [0])]}
    with (
        _conll2003_examples(examples),
        pytest.raises(
            TaskDataError, match=r"tfds:conll2003:train: example 0 has 2 words and 1 tags"
        ),
    ):
        tagging_input.load_tagging_task({"source": "tfds"})
    with (
        tfds.testing.mock_data(num_examples=1),
        pytest.raises(TaskDataError, match=r"no feature config\.data\.tfds_tags_feature='tags'"),
    ):
        tagging_input.load_tagging_task({"source": "tfds", "tfds_tags_feature": "tags"})


def test_tagging_schemes_are_the_scored_ones():
    from bertjax.tasks import scores

    assert set(tagging_config.TAGGING_SCHEMES) == set(scores.SCHEMES)


# ----------------------------------------------------------------------------- bad input


def write(tmp_path, name, content) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def test_bad_files(tmp_path):
    with pytest.raises(TaskDataError, match=r"nope\.txt \(config\.data\.eval_file\): cannot read"):
        load(eval_file="/no/such/nope.txt")
    unknown = write(tmp_path, "dev.txt", "Paris NNP B-NP B-LOC\n\nRome NNP B-NP B-CITY\n")
    with pytest.raises(
        TaskDataError,
        match=r"dev\.txt: line 3: tag 'B-CITY' is not in the label set .*ner_train\.txt",
    ):
        load(eval_file=unknown)
    ragged = write(tmp_path, "r.txt", "-DOCSTART- -X- -X- O\n\nParis NNP B-NP B-LOC\nis VBZ O\n")
    with pytest.raises(TaskDataError, match=r"r\.txt: line 4 has 3 columns; line 3 has 4"):
        load(eval_file=ragged)
    one_column = write(tmp_path, "one.txt", "Paris\n")
    with pytest.raises(
        TaskDataError, match=r"one\.txt: line 1 has 1 columns; config\.data\.tag_column=-1"
    ):
        load(eval_file=one_column)
    empty = write(tmp_path, "empty.txt", "-DOCSTART- -X- -X- O\n\n\n")
    with pytest.raises(
        TaskDataError, match=r"empty\.txt \(config\.data\.train_file\): no sentences"
    ):
        load(train_file=empty)
    latin1 = write(
        tmp_path,
        "latin1.txt",
        "Paris NNP B-NP B-LOC\n\nZ\xfcrich NNP B-NP B-LOC\n".encode("latin-1"),
    )
    with pytest.raises(
        TaskDataError, match=r"latin1\.txt \(config\.data\.train_file\): line 3 is not valid UTF-8"
    ):
        load(train_file=latin1)


def test_config_errors():
    with pytest.raises(ConfigError, match=r"config\.data\.tag_column=0: column 0 holds the word"):
        tagging_config.TaggingConfig(train_file="a.txt", tag_column=0)
    with pytest.raises(ConfigError, match=r"config\.data\.label_names=\(\).*must be given"):
        tagging_config.TaggingConfig(eval_file="a.txt")
    with pytest.raises(ConfigError, match=r"config\.data\.tagging_scheme='bio': must be one of"):
        tagging_config.TaggingConfig(train_file="a.txt", tagging_scheme="bio")
    with pytest.raises(ConfigError, match=r"unknown config key: config\.data\.tags; known keys"):
        tagging_config.from_config({"tags": 1})
    task = tagging_input.load_tagging_task({"eval_file": DEV, "label_names": NER_LABELS})
    assert task.train is None and task.label_names == NER_LABELS
    with pytest.raises(ConfigError, match=r"config\.data\.train_file=''"):
        tagging_input.make_tagging_dataset(task, None, split="train", batch_size=1)
