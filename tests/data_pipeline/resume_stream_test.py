"""Train streams resume from a batch's stream_position exactly where they left off."""

import hashlib
import subprocess
import sys
import time

import numpy as np
import pytest
from support import REPO, tfrecord_files

from data_pipeline import config as config_lib
from data_pipeline import schema, tfrecords
from data_pipeline.errors import UserError
from data_pipeline.finetune import classification_config, classification_input, records
from data_pipeline.tfrecords import PositionError
from data_pipeline.tokenizer import make_tokenizer

LENGTH, PREDICTIONS, WINDOW, RECORDS = 8, 2, 8, 46


def digest(batch) -> str:
    return hashlib.sha256(b"".join(batch[k].tobytes() for k in sorted(batch))).hexdigest()


def check_resumes(read, num_batches, cuts=None):
    """Restarting after batch k (each of `cuts`, or every one) gives the uninterrupted
    batches k + 1, k + 2, ..."""
    full = list(read(None).take(num_batches).as_numpy_iterator())
    hashes = [digest(b) for b in full]
    for k in range(num_batches - 1) if cuts is None else cuts:
        rest = read(full[k]["stream_position"][-1]).take(num_batches - k - 1)
        assert [digest(b) for b in rest.as_numpy_iterator()] == hashes[k + 1 :], k
    return full


# ----------------------------------------------------------------------------- TFRecords


def write_corpus(folder, num_files, count=RECORDS):
    """`count` records dealt round-robin to `num_files` files; input_ids[:, 0] is the record's id."""
    rng = np.random.default_rng(0)
    instances = {
        name: rng.integers(0, 2, (count, *shape)).astype(schema.feature_dtype(name))
        for name, shape in schema.feature_shapes(LENGTH, PREDICTIONS).items()
    }
    instances["input_ids"][:, 0] = np.arange(count)
    records = tfrecords.encode_examples(instances)
    for i in range(num_files):
        tfrecord_files.write_records(str(folder / f"part-{i}.tfrecord"), records[i::num_files])
    return str(folder / "part-*.tfrecord")


def tfrecord_config(files):
    config = config_lib.default_config()
    config.update(
        source="tfrecord",
        tfrecord_train_files=files,
        tfrecord_eval_files=files,
        max_seq_length=LENGTH,
        max_predictions_per_seq=PREDICTIONS,
        shuffle_buffer_size=WINDOW,
    )
    return config


def tfrecord_reader(config, **share):
    def read(position):
        return tfrecords.read_pretraining_dataset(
            config, split="train", batch_size=4, seed=5, position=position, **share
        )

    return read


def write_packable_corpus(folder, count=RECORDS):
    """`count` records of 2 to LENGTH tokens in 2 files, one masked position each;
    input_ids[:, 0] is the record's id."""
    rng = np.random.default_rng(0)
    real = np.arange(LENGTH)[None, :] < rng.integers(2, LENGTH + 1, count)[:, None]
    instances = {
        "input_ids": np.where(real, rng.integers(5, 100, (count, LENGTH)), 0),
        "input_mask": real.astype(np.int32),
        "segment_ids": np.zeros((count, LENGTH), np.int32),
        "masked_lm_positions": np.tile([1, 0], (count, 1)),
        "masked_lm_ids": np.tile([7, 0], (count, 1)),
        "masked_lm_weights": np.tile([1.0, 0.0], (count, 1)).astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, count),
    }
    instances["input_ids"][:, 0] = np.arange(count)
    records = tfrecords.encode_examples(instances)
    for i in range(2):
        tfrecord_files.write_records(str(folder / f"part-{i}.tfrecord"), records[i::2])
    return str(folder / "part-*.tfrecord")


@pytest.mark.slow
def test_a_packed_tfrecord_stream_resumes_at_every_batch(tmp_path):
    config = tfrecord_config(write_packable_corpus(tmp_path))
    config.pack_examples = True  # rows of up to 3 records, each window's packed alone
    full = check_resumes(tfrecord_reader(config), 14)
    epoch, window, rows = np.concatenate([b["stream_position"] for b in full]).T
    assert epoch.max() >= 1 and window.max() == RECORDS // WINDOW
    pairs = np.concatenate([b["next_sentence_weights"].sum(axis=1) for b in full])
    # One masked position a record and PREDICTIONS = 2 a row: the budget, not the 3 slots,
    # bounds a row.
    assert pairs.max() == PREDICTIONS and pairs.mean() > 1.2, pairs.mean()
    # Each record of epoch 0 once, whole: its id at the start of its pair.
    ids = [
        b["input_ids"][r, b["cls_positions"][r, k]]
        for b in full
        for r, k in zip(*np.nonzero(b["next_sentence_weights"]), strict=True)
        if b["stream_position"][r, 0] == 0
    ]
    assert sorted(ids) == list(range(RECORDS))


@pytest.mark.slow
@pytest.mark.parametrize(
    "num_files,process_count", [(3, 1), (4, 2), (1, 2)], ids=["one", "by-file", "by-record"]
)
def test_tfrecord_stream_resumes_at_every_batch(tmp_path, num_files, process_count):
    config = tfrecord_config(write_corpus(tmp_path, num_files))
    shares = [set(), set()]  # of epochs 0 and 1, all processes together
    for index in range(process_count):
        read = tfrecord_reader(config, process_index=index, process_count=process_count)
        full = check_resumes(read, 24 // process_count)
        ids = np.concatenate([b["input_ids"][:, 0] for b in full])
        epoch, done = np.concatenate([b["stream_position"] for b in full]).T
        # Positions count the epoch's records: 1, 2, ..., n, then 1, 2, ... of the next.
        assert epoch.max() >= 2 and np.all(np.diff(epoch) >= 0)
        counts = [np.arange(1, (epoch == e).sum() + 1) for e in range(epoch.max() + 1)]
        np.testing.assert_array_equal(done, np.concatenate(counts))
        for e in (0, 1):
            assert len(set(ids[epoch == e])) == (epoch == e).sum()
            assert not shares[e] & set(ids[epoch == e]), "shares overlap"
            shares[e] |= set(ids[epoch == e])
        # The cuts fall inside a window and at a window's end; a batch straddles two epochs.
        cuts = [b["stream_position"][-1] for b in full]
        assert any(d % WINDOW for _, d in cuts) and any(d % WINDOW == 0 for _, d in cuts)
        assert any(b["stream_position"][0, 0] < b["stream_position"][-1, 0] for b in full)
    assert shares == [set(range(RECORDS))] * 2


def test_tfrecord_stream_resumes_at_the_end_of_an_epoch(tmp_path):
    read = tfrecord_reader(tfrecord_config(write_corpus(tmp_path, 3)))

    def rows(position, batches):
        got = read(position).take(batches).as_numpy_iterator()
        return np.concatenate([np.c_[b["stream_position"], b["input_ids"][:, 0]] for b in got])

    after = rows([0, RECORDS], 5)
    np.testing.assert_array_equal(after, rows(None, 24)[RECORDS : RECORDS + len(after)])
    assert after[0, :2].tolist() == [1, 1]


def test_bad_positions_are_named(tmp_path):
    config = tfrecord_config(write_corpus(tmp_path, 3))
    read = tfrecord_reader(config)
    with pytest.raises(PositionError, match=r"\[0, 1, 2\]: this stream's positions are 2 integers"):
        read([0, 1, 2])
    with pytest.raises(PositionError, match="negative"):
        read([-1, 0])
    with pytest.raises(PositionError, match=f"fewer than {RECORDS + 1} records"):
        read([3, RECORDS + 1])
    with pytest.raises(PositionError, match="the eval split is read from its start"):
        tfrecords.read_pretraining_dataset(
            config, split="eval", batch_size=3, seed=0, position=[0, 0]
        )
    assert issubclass(PositionError, UserError)


@pytest.mark.integration
def test_an_abandoned_iterator_does_not_hold_up_exit(tmp_path):
    files = write_corpus(tmp_path, 4, count=400)
    script = f"""
from data_pipeline import config as config_lib, tfrecords
config = config_lib.default_config()
config.update(source="tfrecord", tfrecord_train_files={files!r}, max_seq_length={LENGTH},
              max_predictions_per_seq={PREDICTIONS}, shuffle_buffer_size=64)
batches = tfrecords.read_pretraining_dataset(config, split="train", batch_size=4, seed=0)
iterator = iter(batches.as_numpy_iterator())
for _ in range(300):
    next(iterator)
print("read", flush=True)
"""
    process = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline() == "read\n"
        read_at = time.monotonic()
        assert process.wait(timeout=60) == 0
        assert time.monotonic() - read_at < 10
    finally:
        process.kill()


# ----------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    """A classification task of 7 sentences."""
    path = tmp_path_factory.mktemp("task") / "train.tsv"
    words = ["the", "river", "town", "bridge", "stone", "iron", "people"]
    rows = [f"{' '.join(words[i:] + words[:i])}\t{i % 2}" for i in range(7)]
    path.write_text("text_a\tlabel\n" + "\n".join(rows) + "\n")
    config = classification_config.ClassificationConfig(
        train_file=str(path), eval_file=str(path), max_seq_length=12
    )
    return classification_input.load_classification_task(config)


def test_classification_stream_resumes_across_epochs(sentences, bert_tokenizer_json):
    tokenizer = make_tokenizer(config_lib.default_config(), bert_tokenizer_json)

    def read(position):
        return classification_input.make_classification_dataset(
            sentences,
            tokenizer,
            split="train",
            batch_size=2,
            seed=3,
            num_epochs=3,
            position=position,
        )[0]

    # int(7 / 2 x 3) = 10 batches; batch 3 ends epoch 0 and starts epoch 1.
    full = check_resumes(read, 10, cuts=(2, 3))
    assert [b["stream_position"].tolist() for b in full] == [[[k], [k]] for k in range(1, 11)]


@pytest.mark.parametrize("process_count", [1, 2])
def test_batch_indices_resume_at_every_batch(process_count):
    for index in range(process_count):

        def read(position, index=index):
            dataset = records.batch_indices(
                7,
                training=True,
                batch_size=2,
                process_index=index,
                process_count=process_count,
                seed=3,
                num_epochs=6,
                position=position,
            )[0]
            return dataset.map(lambda i, w, p: {"index": i, "weight": w, "stream_position": p})

        num_batches = int(7 / (2 * process_count) * 6)
        full = check_resumes(read, num_batches)
        assert len(full) == num_batches
        assert [b["stream_position"][0, 0] for b in full] == list(range(1, num_batches + 1))
        assert list(read(np.array([num_batches], np.int64)).as_numpy_iterator()) == []


def test_bad_fine_tuning_positions_are_named():
    def indices(position, training=True):
        return records.batch_indices(
            7,
            training=training,
            batch_size=2,
            process_index=0,
            process_count=1,
            seed=0,
            num_epochs=2,
            position=position,
        )

    with pytest.raises(PositionError, match=r"\[8\]: there are only 7 batches"):
        indices([8])
    with pytest.raises(PositionError, match="positions are 1 integers"):
        indices([1, 2])
    with pytest.raises(PositionError, match="evaluation reads from the start"):
        indices([1], training=False)
