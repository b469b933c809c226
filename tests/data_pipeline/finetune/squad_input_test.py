"""SQuAD reading, windowing and batching (data_pipeline/finetune/squad_input.py), with the
real bert-base-uncased vocab; turning the model's logits back into answers is
tests/bertjax/tasks/squad_test.py's.

The fixtures (tests/testdata/finetune/squad_v*.json) are small files in the
official formats: 1.1 with several gold answers per question, 2.0 with
unanswerable questions and their plausible answers.
"""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import support
import tensorflow as tf
from support.squad import V1, V1_CONFIG, V2, example, rows_of

from bertjax import losses
from bertjax.model import BertConfig, BertForQuestionAnswering
from bertjax.tasks import finetune
from bertjax.tasks.squad import predict_answers
from data_pipeline.errors import ConfigError
from data_pipeline.finetune import squad_config, squad_input
from data_pipeline.finetune.records import TaskDataError

# One-sentence contexts: several windows fit a row.
SHORT = support.TESTDATA / "finetune" / "squad_short.json"


def tokens(tokenizer, ids):
    return tokenizer.vocab.decode(ids)


# ----------------------------------------------------------------------------- reading


def test_read_v1(v1_data):
    assert v1_data.source == str(V1)
    assert len(v1_data.examples) == 7
    assert not any(e.is_impossible for e in v1_data.examples)
    curie = example(v1_data, "Whom did she marry?")
    assert curie.title == "Marie_Curie"
    assert [a.text for a in curie.answers] == ["Pierre Curie", "Pierre Curie", "Pierre"]
    assert curie.context[curie.answers[0].start :].startswith("Pierre Curie.")
    assert v1_data.gold_answers()[curie.qid] == ["Pierre Curie", "Pierre Curie", "Pierre"]


def test_read_v2(v2_data):
    assert len(v2_data.examples) == 6
    assert any(e.is_impossible for e in v2_data.examples)
    unanswerable = example(v2_data, "What gas do animals release")
    assert unanswerable.is_impossible and unanswerable.answers == ()
    assert [a.text for a in unanswerable.plausible_answers] == ["oxygen"]
    assert v2_data.gold_answers()[unanswerable.qid] == []
    assert not example(v2_data, "What pigment").is_impossible


# ----------------------------------------------------------------------------- features


def test_feature_tokens_with_the_real_vocab(v1_data, v1_features, tokenizer):
    station = example(v1_data, "When did Zürich's main railway station open?")
    (row,) = rows_of(v1_features, station.qid)  # the whole context fits in one window
    length = int(v1_features.input_mask[row].sum())
    row_tokens = tokens(tokenizer, v1_features.input_ids[row, :length])
    assert row_tokens[:12] == [
        "[CLS]", "when", "did", "zurich", "'", "s", "main", "railway", "station", "open", "?",
        "[SEP]",
    ]  # fmt: skip
    assert row_tokens[12:27] == [
        "zurich", "is", "the", "largest", "city", "in", "switzerland", "and", "sits", "at",
        "the", "northern", "end", "of", "lake",
    ]  # fmt: skip
    assert row_tokens[38:40] == ["lim", "##mat"]
    assert row_tokens[-9:] == ["about", "470", ",", "000", "passengers", "a", "day", ".", "[SEP]"]
    assert (v1_features.input_ids[row, length:] == tokenizer.vocab.pad_id).all()
    np.testing.assert_array_equal(
        v1_features.segment_ids[row, :length], [0] * 12 + [1] * (length - 12)
    )
    assert not v1_features.segment_ids[row, length:].any()
    start, end = v1_features.start_positions[row], v1_features.end_positions[row]
    assert row_tokens[start : end + 1] == ["1847"]
    assert v1_features.doc_offset[row] == 12 and v1_features.doc_start[row] == 0
    # One window: it is every document piece's maximum context, and only those.
    np.testing.assert_array_equal(
        np.flatnonzero(v1_features.max_context[row]), np.arange(12, length - 1)
    )


@pytest.mark.parametrize(
    "question, pieces",
    [
        ("Which river", ["lim", "##mat"]),
        ("In what year did she win", ["1911"]),  # "(1911)." is one word; the span is tightened
        ("Whom did she marry?", ["pierre", "cu", "##rie"]),
        ("What is the largest city", ["zurich"]),
    ],
)
def test_answer_positions(v1_data, v1_features, tokenizer, question, pieces):
    (row,) = rows_of(v1_features, example(v1_data, question).qid)
    start, end = v1_features.start_positions[row], v1_features.end_positions[row]
    assert tokens(tokenizer, v1_features.input_ids[row, start : end + 1]) == pieces


def test_unanswerable_points_at_cls(v2_data, v2_features, tokenizer):
    for e in v2_data.examples:
        (row,) = rows_of(v2_features, e.qid)
        if e.is_impossible:
            assert v2_features.start_positions[row] == v2_features.end_positions[row] == 0
        else:
            start, end = v2_features.start_positions[row], v2_features.end_positions[row]
            assert 0 < start <= end
    where = example(v2_data, "Where does photosynthesis")
    (row,) = rows_of(v2_features, where.qid)
    start, end = v2_features.start_positions[row], v2_features.end_positions[row]
    assert tokens(tokenizer, v2_features.input_ids[row, start : end + 1]) == [
        "in", "the", "ch", "##lor", "##op", "##las", "##ts",
    ]  # fmt: skip


def test_windows(v1_data, small_features, tokenizer):
    f = small_features
    assert f.num_examples == 7 and f.num_features > 30
    for index, e in enumerate(v1_data.examples):
        rows = np.flatnonzero(f.example_index == index)
        document = f.documents[index]
        query_length = len(tokenizer.tokenize(tf.constant([e.question]))[0][:12])
        # Windows start doc_stride apart and together cover the document.
        np.testing.assert_array_equal(f.doc_start[rows], 10 * np.arange(rows.size))
        assert (f.doc_length[rows] <= 28 - query_length - 3).all()
        assert f.doc_start[rows[-1]] + f.doc_length[rows[-1]] == document.token_ids.size
        best_count = np.zeros(document.token_ids.size, int)
        for row in rows:
            offset, start, size = f.doc_offset[row], f.doc_start[row], f.doc_length[row]
            assert offset == query_length + 2
            np.testing.assert_array_equal(
                f.input_ids[row, offset : offset + size], document.token_ids[start : start + size]
            )
            assert f.input_ids[row, offset + size] == tokenizer.vocab.sep_id
            assert f.input_mask[row].sum() == offset + size + 1
            positions = np.flatnonzero(f.max_context[row])
            best_count[positions - offset + start] += 1
            # Positions label the answer only where the window holds all of it.
            if f.start_positions[row]:
                assert offset <= f.start_positions[row] <= f.end_positions[row] < offset + size
        # Every piece has its maximum context in exactly one window.
        assert (best_count == 1).all()


def test_max_context_rule():
    # Windows (0, 6) and (3, 6) over 9 pieces. Piece 3: min(3, 2) in the first,
    # min(0, 5) in the second. Piece 4: min(4, 1) and min(1, 4), a tie that the
    # first window wins. Piece 5: min(5, 0) and min(2, 3).
    best = squad_input._best_windows([(0, 6), (3, 6)], 9)
    np.testing.assert_array_equal(best, [0, 0, 0, 0, 0, 1, 1, 1, 1])
    # Piece 4 of (0, 5) and (3, 5): min(4, 0) against min(1, 3).
    np.testing.assert_array_equal(squad_input._best_windows([(0, 5), (3, 5)], 8)[3:5], [0, 1])
    assert squad_input._windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert squad_input._windows(3, 4, 3) == [(0, 3)]


# ----------------------------------------------------------------------------- batches


SCHEMA = {
    "input_ids": (tf.int32, [None, None]),
    "input_mask": (tf.int32, [None, None]),
    "segment_ids": (tf.int32, [None, None]),
    "start_positions": (tf.int32, [None]),
    "end_positions": (tf.int32, [None]),
    "example_weight": (tf.float32, [None]),
    "feature_index": (tf.int32, [None]),
}


def test_training_batches(small_features):
    f = small_features
    dataset, info = squad_input.make_dataset(f, training=True, batch_size=8, seed=3, num_epochs=2.5)
    assert {k: (s.dtype, s.shape.as_list()) for k, s in dataset.element_spec.items()} == {
        k: (dtype, [8, 28] if len(shape) == 2 else [8]) for k, (dtype, shape) in SCHEMA.items()
    } | {"stream_position": (tf.int64, [8, 1])}
    batches = list(dataset.as_numpy_iterator())
    # Epochs run into each other: int(F / 8 * 2.5) full batches, the original's step count.
    assert len(batches) == info.num_batches == int(f.num_features / 8 * 2.5)
    assert info.num_examples == f.num_features
    seen = np.concatenate([b["feature_index"] for b in batches])
    first_epoch = seen[: f.num_features]
    assert sorted(first_epoch) == list(range(f.num_features))
    assert list(first_epoch) != sorted(first_epoch)  # shuffled
    assert list(seen[f.num_features : 2 * f.num_features]) != list(first_epoch)  # anew
    batch = batches[0]
    rows = batch["feature_index"]
    np.testing.assert_array_equal(batch["input_ids"], f.input_ids[rows])
    np.testing.assert_array_equal(batch["input_mask"], f.input_mask[rows])
    np.testing.assert_array_equal(batch["segment_ids"], f.segment_ids[rows])
    np.testing.assert_array_equal(batch["start_positions"], f.start_positions[rows])
    np.testing.assert_array_equal(batch["end_positions"], f.end_positions[rows])
    assert (batch["example_weight"] == 1.0).all()
    # The same seed gives the same order; another gives another.
    again, _ = squad_input.make_dataset(f, training=True, batch_size=8, seed=3, num_epochs=2.5)
    np.testing.assert_array_equal(next(again.as_numpy_iterator())["feature_index"], rows)
    other, _ = squad_input.make_dataset(f, training=True, batch_size=8, seed=4, num_epochs=2.5)
    assert list(next(other.as_numpy_iterator())["feature_index"]) != list(rows)


def test_training_processes_share_each_global_batch(small_features):
    f = small_features
    whole, info = squad_input.make_dataset(f, training=True, batch_size=6, seed=1)
    shares = []
    for process_index in range(3):
        dataset, share_info = squad_input.make_dataset(
            f, training=True, batch_size=2, seed=1, process_index=process_index, process_count=3
        )
        assert share_info.num_batches == info.num_batches
        shares.append([b["feature_index"] for b in dataset.as_numpy_iterator()])
    for step, batch in enumerate(whole.as_numpy_iterator()):
        np.testing.assert_array_equal(
            np.concatenate([share[step] for share in shares]), batch["feature_index"]
        )


def test_eval_batches_hold_every_feature_once_and_pad(small_features):
    f = small_features
    batch_size = 8
    for process_count in (1, 2):
        seen = []
        for process_index in range(process_count):
            dataset, info = squad_input.make_dataset(
                f,
                training=False,
                batch_size=batch_size,
                process_index=process_index,
                process_count=process_count,
            )
            batches = list(dataset.as_numpy_iterator())
            assert len(batches) == info.num_batches
            assert info.num_batches == -(-f.num_features // (batch_size * process_count))
            assert all(b["input_ids"].shape == (batch_size, 28) for b in batches)
            merged = {k: np.concatenate([b[k] for b in batches]) for k in SCHEMA}
            real = merged["feature_index"] >= 0
            np.testing.assert_array_equal(merged["example_weight"], real.astype(np.float32))
            assert not merged["input_mask"][~real].any()
            assert not merged["start_positions"][~real].any()
            assert (merged["input_ids"][~real] == f.pad_id).all()
            np.testing.assert_array_equal(
                merged["input_ids"][real], f.input_ids[merged["feature_index"][real]]
            )
            seen.append(merged["feature_index"][real])
        assert sorted(np.concatenate(seen)) == list(range(f.num_features))
    assert (~real).any()  # the fixture leaves a partial last batch


def test_dataset_arguments(small_features):
    with pytest.raises(ValueError, match="batch_size=0"):
        squad_input.make_dataset(small_features, training=True, batch_size=0)
    with pytest.raises(ValueError, match="process_index=2"):
        squad_input.make_dataset(
            small_features, training=False, batch_size=2, process_index=2, process_count=2
        )


# ----------------------------------------------------------------------------- packing


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
def test_packed_windows_give_their_unpacked_logits_loss_and_answers(tokenizer):
    config = squad_config.SquadConfig(max_seq_length=64, max_query_length=16, doc_stride=16)
    features = squad_input.make_features(squad_input.read_squad_json(SHORT), tokenizer, config)
    task = squad_input.SquadTask(config, features, features)
    shape = squad_input.packed_shape(task, split="eval", batch_size=8)
    assert shape.rows < 8 and shape.slots > 1
    plain, _ = squad_input.make_dataset(features, training=False, batch_size=8)
    packed, _ = squad_input.make_dataset(features, training=False, batch_size=8, packed=shape)
    model = BertForQuestionAnswering(TINY)
    params = model.init(jax.random.key(0), *(np.zeros((1, 64), np.int32),) * 3, deterministic=True)
    logits = {False: [], True: []}
    indices = []
    for a, b in zip(plain.as_numpy_iterator(), packed.as_numpy_iterator(), strict=True):
        assert b["input_ids"].shape == (shape.rows, 64)
        expected = model.apply(params, *(a[k] for k in INPUTS), deterministic=True)
        got = model.apply(params, *(b[k] for k in INPUTS), deterministic=True)
        unpacked, passed = finetune._outputs_and_bookkeeping(got, jax.tree.map(jnp.asarray, b))
        np.testing.assert_array_equal(passed["feature_index"], a["feature_index"])
        real = a["input_mask"] > 0
        for x, y in zip(unpacked, expected, strict=True):
            np.testing.assert_allclose(np.asarray(x)[real], np.asarray(y)[real], atol=2e-5)
        # The positions in the row point at the tokens the unpacked positions do.
        row, slot = np.divmod(b["example_slot"], shape.slots)
        for name in ("start_positions", "end_positions"):
            in_row = b["input_ids"][row, b[name][row, slot]]
            in_plain = a["input_ids"][np.arange(8), a[name]]
            np.testing.assert_array_equal(in_row[real[:, 0]], in_plain[real[:, 0]])
        plain_sums = losses.span_sums(expected, a)
        packed_sums = losses.span_sums(got, b)
        for key in plain_sums:
            np.testing.assert_allclose(packed_sums[key], plain_sums[key], rtol=1e-5)
        logits[False].append(expected)
        logits[True].append(unpacked)
        indices.append(a["feature_index"])
    answers = {
        packed: predict_answers(
            features,
            np.concatenate(indices),
            *(np.concatenate([np.asarray(x[i]) for x in logits[packed]]) for i in (0, 1)),
            tokenizer,
        )
        for packed in (False, True)
    }
    assert answers[True].answers == answers[False].answers
    for qid, best in answers[False].nbest.items():
        assert [e["text"] for e in answers[True].nbest[qid]] == [e["text"] for e in best]


# ----------------------------------------------------------------------------- the task


def test_load_squad_task_from_files(tokenizer):
    data_config = {
        "train_file": str(V1),
        "eval_file": str(V1),
        "max_seq_length": 28,
        "max_query_length": 12,
        "doc_stride": 10,
    }
    task = squad_input.load_squad_task(data_config, tokenizer)
    assert task.config == squad_config.SquadConfig(**data_config)
    assert task.train.num_examples == task.eval.num_examples == 7
    assert task.eval.num_features > 30
    dataset, num_batches = squad_input.make_task_dataset(task, split="eval", batch_size=16)
    assert num_batches == -(-task.eval.num_features // 16)
    assert len(list(dataset.as_numpy_iterator())) == num_batches
    dataset, num_batches = squad_input.make_task_dataset(
        task, split="train", batch_size=4, num_epochs=2.0
    )
    assert num_batches == int(task.train.num_features / 4 * 2.0)
    eval_only = squad_input.load_squad_task({"eval_file": str(V1)}, tokenizer)
    assert eval_only.train is None
    with pytest.raises(ConfigError, match="config.data.train_file=''"):
        squad_input.make_task_dataset(eval_only, split="train", batch_size=4)


def test_load_squad_task_options(tokenizer):
    with pytest.raises(ConfigError, match="config.data.train_file=''.*train_file, eval_file"):
        squad_input.load_squad_task({}, tokenizer)
    with pytest.raises(
        ConfigError, match=r"max_seq_len; did you mean config\.data\.max_seq_length"
    ):
        squad_input.load_squad_task({"eval_file": str(V1), "max_seq_len": 64}, tokenizer)
    with pytest.raises(ConfigError, match="config.data.source='json'"):
        squad_input.load_squad_task({"source": "json"}, tokenizer)
    with pytest.raises(squad_input.SquadError, match=r"missing\.json: cannot read"):
        squad_input.load_squad_task({"eval_file": "missing.json"}, tokenizer)


# ----------------------------------------------------------------------------- TFDS


def _tfds_as_dataset(data: squad_input.SquadData, version_2: bool):
    def records():
        for e in data.examples:
            record = {
                "id": e.qid,
                "title": e.title,
                "context": e.context,
                "question": e.question,
                "answers": {
                    "text": [a.text for a in e.answers],
                    "answer_start": np.array([a.start for a in e.answers], np.int32),
                },
            }
            if version_2:
                record["is_impossible"] = e.is_impossible
                record["plausible_answers"] = {
                    "text": [a.text for a in e.plausible_answers],
                    "answer_start": np.array([a.start for a in e.plausible_answers], np.int32),
                }
            yield record

    answers = {
        "text": tf.TensorSpec([None], tf.string),
        "answer_start": tf.TensorSpec([None], tf.int32),
    }
    signature = {
        name: tf.TensorSpec([], tf.string) for name in ("id", "title", "context", "question")
    }
    signature["answers"] = answers
    if version_2:
        signature["is_impossible"] = tf.TensorSpec([], tf.bool)
        signature["plausible_answers"] = answers

    def as_dataset(self, *args, **kwargs):
        return tf.data.Dataset.from_generator(records, output_signature=signature)

    return as_dataset


@pytest.mark.parametrize("name, path", [("squad/v1.1", V1), ("squad/v2.0", V2)])
def test_tfds_squad(name, path, tmp_path):
    import tensorflow_datasets as tfds

    from_json = squad_input.read_squad_json(path)
    as_dataset = _tfds_as_dataset(from_json, version_2=name.endswith("2.0"))
    with tfds.testing.mock_data(as_dataset_fn=as_dataset, data_dir=str(tmp_path)):
        from_tfds = squad_input.read_squad_tfds(name, "validation", data_dir=str(tmp_path))
    assert from_tfds.source == f"tfds:{name}:validation"
    assert from_tfds.examples == from_json.examples


def test_load_squad_task_from_tfds(tokenizer, tmp_path):
    import tensorflow_datasets as tfds

    as_dataset = _tfds_as_dataset(squad_input.read_squad_json(V2), version_2=True)
    data_config = {
        "source": "tfds",
        "tfds_name": "squad/v2.0",
        "tfds_data_dir": str(tmp_path),
        "version_2_with_negative": True,
    }
    with tfds.testing.mock_data(as_dataset_fn=as_dataset, data_dir=str(tmp_path)):
        task = squad_input.load_squad_task(data_config, tokenizer)
    assert task.train.data.source == "tfds:squad/v2.0:train"
    assert task.eval.data.source == "tfds:squad/v2.0:validation"
    assert task.eval.num_examples == 6


def test_tfds_mock_random_data_fails_the_answer_check(tmp_path):
    import tensorflow_datasets as tfds

    # Random text cannot hold its answers at their offsets.
    with (
        tfds.testing.mock_data(num_examples=3, data_dir=str(tmp_path)),
        pytest.raises(squad_input.SquadError, match=r"^tfds:squad/v1.1:train: question"),
    ):
        squad_input.read_squad_tfds("squad/v1.1", "train", data_dir=str(tmp_path))


def test_tfds_errors(tmp_path):
    # Not prepared in tmp_path; nothing is downloaded.
    with pytest.raises(TaskDataError, match="'squad/v1.1' .*split 'validation'"):
        squad_input.read_squad_tfds("squad/v1.1", "validation", data_dir=str(tmp_path))
    with pytest.raises(TaskDataError, match="'no_such_squad'"):
        squad_input.read_squad_tfds("no_such_squad", "train", data_dir=str(tmp_path))
    with pytest.raises(squad_input.SquadError, match="tfds:mnist:train: not a SQuAD dataset"):
        squad_input.read_squad_tfds("mnist", "train", data_dir=str(tmp_path))


# ----------------------------------------------------------------------------- bad input


def _write(tmp_path, content) -> str:
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def _edit(path, change):
    content = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    change(content)
    return content


def _first_qa(content):
    return content["data"][0]["paragraphs"][0]["qas"][0]


LIMMAT_ID = "8c68bb96aff86be3687f3c6d"  # "Which river flows through the old town of Zürich?"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.pop("data"), r"the file has no 'data'"),
        (lambda c: c["data"][0].pop("paragraphs"), r"data\[0\] has no 'paragraphs'"),
        (
            lambda c: c["data"][1]["paragraphs"][0].pop("context"),
            r"data\[1\]\.paragraphs\[0\] has no 'context'",
        ),
        (lambda c: _first_qa(c).pop("id"), r"data\[0\]\.paragraphs\[0\]\.qas\[0\] has no 'id'"),
        (
            lambda c: _first_qa(c).pop("question"),
            r"question 'b8cdbf50423847102fab6dfd' .* no 'question'",
        ),
        (lambda c: _first_qa(c).pop("answers"), r"'b8cdbf50423847102fab6dfd' .* no 'answers'"),
        (
            lambda c: _first_qa(c)["answers"][1].pop("answer_start"),
            r"'b8cdbf50423847102fab6dfd' .*answers\[1\] has no 'answer_start'",
        ),
        (
            lambda c: _first_qa(c)["answers"][0].update(answer_start="0"),
            r"'answer_start' is a string, expected a number",
        ),
        (lambda c: _first_qa(c).update(id=7), r"'id' is a number, expected a string"),
        (
            lambda c: c["data"][0].update(paragraphs={}),
            r"'paragraphs' is an object, expected a list",
        ),
        (lambda c: c["data"].__setitem__(0, []), r"data\[0\] is a list, expected an object"),
        (
            lambda c: c["data"][0]["paragraphs"][0]["qas"][1]["answers"][0].update(
                answer_start=127
            ),
            rf"question '{LIMMAT_ID}': answer 'Limmat' does not match the context at "
            r"answer_start=127, which reads 'immat,'",
        ),
        (
            lambda c: _first_qa(c)["answers"][0].update(answer_start=5000),
            r"'b8cdbf50423847102fab6dfd': answer 'Zürich' at answer_start=5000 runs outside",
        ),
        (lambda c: _first_qa(c)["answers"][0].update(text=" "), r"an answer has no text"),
        (lambda c: c.update(data=[]), r"no questions"),
        (
            lambda c: c["data"][0]["paragraphs"][0]["qas"][1].update(id="b8cdbf50423847102fab6dfd"),
            r"question 'b8cdbf50423847102fab6dfd': the id is used twice",
        ),
        (
            lambda c: _first_qa(c).update(answers=[]),
            r"'b8cdbf50423847102fab6dfd': no answers, and not",
        ),
        (
            lambda c: _first_qa(c).update(is_impossible=True),
            r"'b8cdbf50423847102fab6dfd': is_impossible, yet it has answers",
        ),
    ],
)
def test_bad_files(tmp_path, change, message):
    path = _write(tmp_path, _edit(V1, change))
    with pytest.raises(squad_input.SquadError, match=rf"^{tmp_path / 'bad.json'}: .*{message}"):
        squad_input.read_squad_json(path)


def test_unreadable_files(tmp_path):
    with pytest.raises(squad_input.SquadError, match=r"missing\.json: cannot read the SQuAD file"):
        squad_input.read_squad_json(tmp_path / "missing.json")
    with pytest.raises(squad_input.SquadError, match=r"bad\.json: not valid JSON"):
        squad_input.read_squad_json(_write(tmp_path, '{"data": [}'))
    with pytest.raises(squad_input.SquadError, match=r"bad\.json: the file is a list"):
        squad_input.read_squad_json(_write(tmp_path, "[]"))
    (tmp_path / "latin1.json").write_bytes(b'{"data": "Z\xfcrich"}')
    with pytest.raises(squad_input.SquadError, match=r"latin1\.json: not UTF-8"):
        squad_input.read_squad_json(tmp_path / "latin1.json")


def test_v2_questions_need_version_2(v2_data, tokenizer):
    with pytest.raises(
        squad_input.SquadError,
        match=rf"^{V2}: question '0683fdd4d9be7050da7084a8' has no answer .*version_2_with_negative",
    ):
        squad_input.make_features(v2_data, tokenizer, V1_CONFIG)


def test_context_without_tokens(tokenizer):
    e = squad_input.SquadExample("q1", "Why?", "\u200b\u200b", (squad_input.Answer("\u200b", 0),))
    with pytest.raises(
        squad_input.SquadError, match="^ctx.json: question 'q1': the context has no tokens"
    ):
        squad_input.make_features(squad_input.SquadData("ctx.json", (e,)), tokenizer, V1_CONFIG)


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"max_seq_length": 64, "max_query_length": 61},
            r"config\.data\.max_query_length=61: max_query_length \+ 3 >= max_seq_length=64",
        ),
        ({"max_seq_length": 64, "max_query_length": 64}, r"max_query_length=64: .*>= max_seq"),
        (
            {"max_seq_length": 64, "max_query_length": 10, "doc_stride": 52},
            r"config\.data\.doc_stride=52: must be in \[1, .* = 51\]",
        ),
        ({"doc_stride": 0}, r"config\.data\.doc_stride=0"),
        ({"max_query_length": 0}, r"config\.data\.max_query_length=0"),
        ({"n_best_size": 0}, r"config\.data\.n_best_size=0"),
        ({"max_answer_length": 0}, r"config\.data\.max_answer_length=0"),
        ({"source": "json"}, r"config\.data\.source='json'"),
    ],
)
def test_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        squad_config.SquadConfig(**options)


def test_long_questions_are_cut_to_max_query_length(v1_data, tokenizer):
    e = example(v1_data, "In which city was Marie Curie born?")
    long_question = " ".join(["where"] * 100) + " " + e.question
    data = squad_input.SquadData("x", (dataclasses.replace(e, question=long_question),))
    config = squad_config.SquadConfig(max_seq_length=32, max_query_length=5, doc_stride=8)
    features = squad_input.make_features(data, tokenizer, config)
    assert (features.doc_offset == 7).all()
    assert tokens(tokenizer, features.input_ids[0, :7]) == ["[CLS]"] + ["where"] * 5 + ["[SEP]"]
