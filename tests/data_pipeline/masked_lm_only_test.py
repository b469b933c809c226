"""Masked LM alone (config.data.next_sentence_prediction=False) through the online pipeline,
the offline writer and the TFRecord reader, packed and unpacked; and the eval split's own
masking rate (config.data.eval_masked_lm_prob)."""

import os
import random

import numpy as np
import pytest

from data_pipeline import config as config_lib
from data_pipeline import offline_writer as writer
from data_pipeline import pretraining_input, schema, tfrecords
from data_pipeline.vocab import load_vocab

# Words of the bert-base-uncased vocabulary, each one token.
WORDS = (
    "the river town bridge stone iron people day night city road house water field tree "
    "garden window door market school church king queen ship harbor winter summer morning"
)
LENGTH = 64


@pytest.fixture
def corpus_documents(tmp_path, bert_tokenizer_json):
    """30 documents of one-token words in 3 files; returns (the glob, each document's
    token ids in order)."""
    vocab = load_vocab(bert_tokenizer_json)
    rng = random.Random(0)
    documents, texts = [], []
    for _ in range(30):
        sentences = [
            rng.choices(WORDS.split(), k=rng.randint(6, 14)) for _ in range(rng.randint(10, 20))
        ]
        texts.append("\n".join(" ".join(words) + " ." for words in sentences))
        documents.append([vocab.token_to_id(w) for words in sentences for w in (*words, ".")])
    for f in range(3):
        (tmp_path / f"part-{f}.txt").write_text("\n\n".join(texts[f::3]) + "\n", encoding="utf-8")
    return str(tmp_path / "part-*.txt"), documents


@pytest.fixture
def mlm_config(data_config, bert_tokenizer_json, corpus_documents):
    data_config.update(
        vocab_file=bert_tokenizer_json,
        source="text",
        text_files=corpus_documents[0],
        eval_fraction=0.3,
        max_seq_length=LENGTH,
        max_predictions_per_seq=20,
        masked_lm_prob=0.3,
        eval_masked_lm_prob=0.15,
        next_sentence_prediction=False,
        document_buffer_size=8,
        shuffle_buffer_size=64,
        dupe_factor=1,
    )
    return data_config


def unmasked(batch):
    """input_ids with the original tokens put back at the predicted positions."""
    ids = batch["input_ids"].copy()
    real = batch["masked_lm_weights"] > 0
    rows = np.nonzero(real)[0]
    ids[rows, batch["masked_lm_positions"][real]] = batch["masked_lm_ids"][real]
    return ids


def check_single_segments(batch, vocab, documents, *, packed: bool, tails: bool = False) -> int:
    """Every sequence is `[CLS] text [SEP]` of contiguous text of one document, segment ids
    0, and the batch has no NSP features; returns how many sequences it holds. `tails`
    (no short passes): a sequence shorter than LENGTH ends its document."""
    assert set(batch) - {"stream_position"} == set(schema.features(packed, next_sentence=False))
    assert not set(batch) & {"next_sentence_labels", "next_sentence_weights", "cls_positions"}
    assert not batch["segment_ids"].any()
    streams = [" " + " ".join(map(str, document)) + " " for document in documents]
    ids, mask = unmasked(batch), batch["input_mask"]
    count = 0
    for row in range(len(ids)):
        for k in range(1, mask[row].max() + 1):
            at = np.flatnonzero(mask[row] == k)
            assert (np.diff(at) == 1).all(), "a sequence is one run of positions"
            tokens = ids[row, at].tolist()
            assert tokens[0] == vocab.cls_id and tokens[-1] == vocab.sep_id
            assert tokens.count(vocab.cls_id) == tokens.count(vocab.sep_id) == 1
            text = " " + " ".join(map(str, tokens[1:-1])) + " "
            assert any(text in stream for stream in streams), "contiguous text of a document"
            if tails and len(tokens) < LENGTH:
                assert any(stream.endswith(text) for stream in streams), "a document's tail"
            count += 1
    return count


def masked_share(batches) -> float:
    predicted = sum(float(b["masked_lm_weights"].sum()) for b in batches)
    return predicted / sum(int(np.count_nonzero(b["input_mask"])) for b in batches)


@pytest.mark.parametrize("packed", [False, True])
def test_online_batches_are_single_segments_of_contiguous_text(
    mlm_config, corpus_documents, packed
):
    # No short passes: a document's text is cut into sequences of max_seq_length tokens,
    # whatever its sentences, and only its last one is shorter.
    mlm_config.update(pack_examples=packed, short_seq_prob=0.0)
    vocab = load_vocab(mlm_config.vocab_file)
    dataset = pretraining_input.make_pretraining_dataset(
        mlm_config, split="train", batch_size=8, seed=0
    )
    batches = list(dataset.take(6).as_numpy_iterator())
    sequences = sum(
        check_single_segments(b, vocab, corpus_documents[1], packed=packed, tails=True)
        for b in batches
    )
    assert sequences > 6 * 8 if packed else sequences == 6 * 8


def test_online_eval_split_is_masked_at_its_own_rate(mlm_config):
    def share(split):
        dataset = pretraining_input.make_pretraining_dataset(
            mlm_config, split=split, batch_size=4, seed=0
        )
        return masked_share(list(dataset.take(10).as_numpy_iterator()))

    assert share("train") == pytest.approx(0.3, abs=0.02)
    assert share("eval") == pytest.approx(0.15, abs=0.02)
    mlm_config.eval_masked_lm_prob = 0.0  # the training rate
    assert share("eval") == pytest.approx(0.3, abs=0.02)


def read_records(config, output_dir, split, *, packed=False):
    files = os.path.join(output_dir, f"{split}-*.tfrecord")
    read = config_lib.from_config(config).replace(
        source="tfrecord",
        tfrecord_train_files=files,
        tfrecord_eval_files=files,
        pack_examples=packed,
    )
    dataset = tfrecords.read_pretraining_dataset(read, split="eval", batch_size=4, seed=0)
    return list(dataset.as_numpy_iterator()), read


@pytest.fixture
def written(mlm_config, tmp_path):
    output_dir = str(tmp_path / "records")
    writer.write_pretraining_data(mlm_config, output_dir, seed=0)
    return output_dir


def test_offline_records_are_single_segments_read_packed_and_unpacked(
    mlm_config, written, corpus_documents
):
    vocab = load_vocab(mlm_config.vocab_file)
    for split, rate in (("train", 0.3), ("eval", 0.15)):
        batches, _ = read_records(mlm_config, written, split)
        assert batches
        for batch in batches:
            check_single_segments(batch, vocab, corpus_documents[1], packed=False)
        # The eval split was written at eval_masked_lm_prob, the train split at masked_lm_prob.
        assert masked_share(batches) == pytest.approx(rate, abs=0.02), split
        rows, _ = read_records(mlm_config, written, split, packed=True)
        packed = sum(
            check_single_segments(b, vocab, corpus_documents[1], packed=True) for b in rows
        )
        assert packed > 4 * len(rows)  # several sequences to a row
        assert masked_share(rows) == pytest.approx(rate, abs=0.02), split


def test_records_and_config_must_agree_on_next_sentence_prediction(mlm_config, written, tmp_path):
    mlm_config.next_sentence_prediction = True
    with pytest.raises(
        tfrecords.TFRecordError,
        match=r"sequences without next-sentence prediction, but "
        r"config\.data\.next_sentence_prediction=True",
    ):
        read_records(mlm_config, written, "train")
    pairs = str(tmp_path / "pairs")
    writer.write_pretraining_data(mlm_config, pairs, seed=0)
    mlm_config.next_sentence_prediction = False
    with pytest.raises(
        tfrecords.TFRecordError,
        match=r"sentence pairs for next-sentence prediction, but "
        r"config\.data\.next_sentence_prediction=False",
    ):
        read_records(mlm_config, pairs, "train")


def test_the_writer_refuses_too_few_predictions_for_the_rate(mlm_config, tmp_path):
    mlm_config.max_predictions_per_seq = 15  # 64 * 0.3 = 19.2 masked positions
    with pytest.raises(
        config_lib.ConfigError,
        match=r"^config\.data\.max_predictions_per_seq=15: .*masked_lm_prob=0\.3; raise it to "
        r"at least 19",
    ):
        writer.write_pretraining_data(mlm_config, str(tmp_path / "out"), seed=0)
    assert not (tmp_path / "out").exists()
