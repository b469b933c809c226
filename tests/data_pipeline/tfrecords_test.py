"""Offline pretraining TFRecords: the tf.Example encoding, the reader and its checks."""

import collections
import pathlib

import numpy as np
import pytest
import tensorflow as tf
from support import tfrecord_files

from data_pipeline import config as config_lib
from data_pipeline import schema, tfrecords

LENGTH, PREDICTIONS = 32, 5


def random_instances(count, *, start=0, seed=0, length=LENGTH, predictions=PREDICTIONS):
    """Instances in the schema whose input_ids[:, 1] is a unique number (start + row)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, length + 1, count)
    real = np.arange(length)[None, :] < lengths[:, None]
    input_ids = np.where(real, rng.integers(5, 30_000, (count, length)), 0).astype(np.int32)
    input_ids[:, 1] = start + np.arange(count)
    weights = np.arange(predictions)[None, :] < rng.integers(1, predictions + 1, count)[:, None]
    return {
        "input_ids": input_ids,
        "input_mask": real.astype(np.int32),
        "segment_ids": (real & (np.arange(length)[None, :] > lengths[:, None] // 2)).astype(
            np.int32
        ),
        "masked_lm_positions": np.where(weights, rng.integers(1, length, weights.shape), 0).astype(
            np.int32
        ),
        "masked_lm_ids": np.where(weights, rng.integers(5, 30_000, weights.shape), 0).astype(
            np.int32
        ),
        "masked_lm_weights": weights.astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, count).astype(np.int32),
    }


def write_files(folder, name, instances, num_files):
    """Splits `instances` round-robin over `num_files` files; returns their glob."""
    count = len(instances["input_ids"])
    records = tfrecords.encode_examples(instances)
    for index in range(num_files):
        tfrecord_files.write_records(
            str(folder / f"{name}-{index:03d}.tfrecord"), records[index:count:num_files]
        )
    return str(folder / f"{name}-*.tfrecord")


def tfrecord_config(data_config, train="", eval_files="", **changes):
    data_config.source = "tfrecord"
    data_config.tfrecord_train_files = train or eval_files
    data_config.tfrecord_eval_files = eval_files
    data_config.max_seq_length = LENGTH
    data_config.max_predictions_per_seq = PREDICTIONS
    data_config.shuffle_buffer_size = 64
    for key, value in changes.items():
        data_config[key] = value
    return config_lib.from_config(data_config)


def read_all(
    config, split, *, batch_size=1, process_index=0, process_count=1, seed=0, batches=None
):
    dataset = tfrecords.read_pretraining_dataset(
        config,
        split=split,
        batch_size=batch_size,
        process_index=process_index,
        process_count=process_count,
        seed=seed,
    )
    if batches is not None:
        dataset = dataset.take(batches)
    out = list(dataset.as_numpy_iterator())
    return {name: np.concatenate([b[name] for b in out]) for name in schema.FEATURES}


@pytest.mark.parametrize("seed", [0, 1])
def test_encoding_is_byte_identical_to_tf_train_example(seed):
    instances = random_instances(200, seed=seed, length=160, predictions=24)
    # Positions above 127 take two varint bytes; ids above 2**21 take four.
    instances["input_ids"][:50, 2] = np.random.default_rng(seed).integers(2**21, 2**31 - 1, 50)
    records = tfrecords.encode_examples(instances)
    for row, record in enumerate(records):
        example = tfrecord_files.make_example({k: v[row] for k, v in instances.items()})
        assert record == example.SerializeToString(deterministic=True)


def test_encoding_of_extreme_values_parses_back():
    instances = random_instances(4, length=8, predictions=2)
    instances["input_ids"] = instances["input_ids"].astype(np.int64)
    instances["input_ids"][0, :4] = [-1, -(2**63), 2**63 - 1, 2**35]
    instances["masked_lm_weights"][1] = [0.5, -0.0]
    records = tfrecords.encode_examples(instances)
    for row, record in enumerate(records):
        example = tfrecord_files.make_example({k: v[row] for k, v in instances.items()})
        assert record == example.SerializeToString(deterministic=True)
        parsed = tf.train.Example.FromString(record).features.feature
        assert list(parsed["input_ids"].int64_list.value) == instances["input_ids"][row].tolist()
        assert list(parsed["masked_lm_weights"].float_list.value) == pytest.approx(
            instances["masked_lm_weights"][row].tolist()
        )


def test_round_trip(tmp_path, data_config):
    instances = random_instances(48)
    glob = write_files(tmp_path, "eval", instances, num_files=3)
    config = tfrecord_config(data_config, eval_files=glob)
    batches = list(
        tfrecords.read_pretraining_dataset(
            config, split="eval", batch_size=8, seed=0
        ).as_numpy_iterator()
    )
    assert len(batches) == 6
    for name in schema.FEATURES:
        assert batches[0][name].dtype == schema.feature_dtype(name), name
        assert batches[0][name].shape == (8, *schema.feature_shapes(LENGTH, PREDICTIONS)[name])
    got = {name: np.concatenate([b[name] for b in batches]) for name in schema.FEATURES}
    order = np.argsort(got["input_ids"][:, 1])
    for name in schema.FEATURES:
        np.testing.assert_array_equal(got[name][order], instances[name], err_msg=name)


def test_reads_files_in_the_original_layout(tmp_path, data_config):
    """Examples built the way google-research/bert's create_pretraining_data.py builds them."""
    instances = random_instances(10)
    path = str(tmp_path / "original.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for row in range(10):
            features = collections.OrderedDict()
            for name in (
                "input_ids",
                "input_mask",
                "segment_ids",
                "masked_lm_positions",
                "masked_lm_ids",
            ):
                features[name] = tf.train.Feature(
                    int64_list=tf.train.Int64List(value=list(instances[name][row]))
                )
            features["masked_lm_weights"] = tf.train.Feature(
                float_list=tf.train.FloatList(value=list(instances["masked_lm_weights"][row]))
            )
            features["next_sentence_labels"] = tf.train.Feature(
                int64_list=tf.train.Int64List(value=[int(instances["next_sentence_labels"][row])])
            )
            example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(example.SerializeToString())
    config = tfrecord_config(data_config, eval_files=path)
    got = read_all(config, "eval", batch_size=5)
    for name in schema.FEATURES:
        np.testing.assert_array_equal(got[name], instances[name], err_msg=name)
    assert got["next_sentence_labels"].shape == (10,)


@pytest.mark.parametrize(
    "num_files,process_count",
    [(4, 2), (5, 3), (2, 3), (1, 2)],
    ids=["by-file", "by-file-uneven", "by-record", "one-file"],
)
def test_process_shares_are_disjoint_and_complete(tmp_path, data_config, num_files, process_count):
    count = 30
    glob = write_files(tmp_path, "data", random_instances(count), num_files=num_files)
    config = tfrecord_config(data_config, train=glob, eval_files=glob)
    for split in ("eval", "train"):
        shares = []
        for index in range(process_count):
            # Train repeats forever: read enough to see every record of the share several times.
            batches = 4 * count if split == "train" else None
            got = read_all(
                config, split, process_index=index, process_count=process_count, batches=batches
            )
            ids = got["input_ids"][:, 1].tolist()
            if split == "eval":
                assert len(ids) == len(set(ids)), "eval reads every record once"
            shares.append(set(ids))
        union = set().union(*shares)
        assert union == set(range(count)), split
        assert sum(len(s) for s in shares) == count, f"{split}: shares overlap"


def test_train_is_shuffled_repeated_and_deterministic(tmp_path, data_config):
    count = 40
    glob = write_files(tmp_path, "train", random_instances(count), num_files=4)
    config = tfrecord_config(data_config, train=glob, eval_files=glob)

    def first_ids(seed):
        return read_all(config, "train", batch_size=4, seed=seed, batches=30)["input_ids"][:, 1]

    ids = first_ids(0)
    assert len(ids) == 120  # three passes over 40 records, and it keeps going
    np.testing.assert_array_equal(ids, first_ids(0))
    assert not np.array_equal(ids, first_ids(1))
    assert not np.array_equal(ids[:count], np.sort(ids[:count]))
    # Passes overlap in the shuffle buffer, so only the totals are exact.
    assert set(ids.tolist()) == set(range(count))
    assert max(collections.Counter(ids.tolist()).values()) <= 4


def test_eval_reads_file_after_file_in_sorted_order(tmp_path, data_config):
    glob = write_files(tmp_path, "eval", random_instances(20), num_files=2)
    config = tfrecord_config(data_config, eval_files=glob)
    first = read_all(config, "eval", seed=0)["input_ids"][:, 1]
    # write_files deals records round-robin: file 0 holds the even ones.
    assert first.tolist() == list(range(0, 20, 2)) + list(range(1, 20, 2))
    np.testing.assert_array_equal(first, read_all(config, "eval", seed=7)["input_ids"][:, 1])


def test_mismatched_max_seq_length_names_the_file_and_both_values(tmp_path, data_config):
    glob = write_files(tmp_path, "train", random_instances(4, length=48), num_files=1)
    config = tfrecord_config(data_config, train=glob, eval_files=glob)
    with pytest.raises(tfrecords.TFRecordError) as error:
        tfrecords.read_pretraining_dataset(config, split="train", batch_size=2, seed=0)
    message = str(error.value)
    assert "train-000.tfrecord" in message
    assert "48" in message and f"max_seq_length={LENGTH}" in message


def test_mismatched_max_predictions_names_the_option(tmp_path, data_config):
    glob = write_files(tmp_path, "train", random_instances(4, predictions=7), num_files=1)
    config = tfrecord_config(data_config, train=glob, eval_files=glob)
    with pytest.raises(
        tfrecords.TFRecordError, match=r"train-000\.tfrecord.*7.*max_predictions_per_seq=5"
    ):
        tfrecords.read_pretraining_dataset(config, split="train", batch_size=2, seed=0)


def test_glob_matching_nothing_names_the_glob(tmp_path, data_config):
    glob = str(tmp_path / "nothing-*.tfrecord")
    config = tfrecord_config(data_config, train=glob, eval_files=glob)
    with pytest.raises(tfrecords.TFRecordError, match=r"glob matches no files: .*nothing-\*"):
        tfrecords.read_pretraining_dataset(config, split="train", batch_size=2, seed=0)


def test_missing_file_is_named(tmp_path, data_config):
    good = write_files(tmp_path, "train", random_instances(4), num_files=1)
    missing = str(tmp_path / "missing.tfrecord")
    config = tfrecord_config(data_config, train=f"{good},{missing}", eval_files=missing)
    with pytest.raises(tfrecords.TFRecordError, match=r"file not found: .*missing\.tfrecord"):
        tfrecords.read_pretraining_dataset(config, split="train", batch_size=2, seed=0)


def test_a_file_that_is_not_a_tfrecord_is_named(tmp_path, data_config):
    path = tmp_path / "notes.txt"
    path.write_text("one sentence per line\n\nis a text file, not a TFRecord\n")
    config = tfrecord_config(data_config, train=str(path), eval_files=str(path))
    with pytest.raises(tfrecords.TFRecordError, match=r"notes\.txt: not a TFRecord"):
        tfrecords.read_pretraining_dataset(config, split="eval", batch_size=2, seed=0)


def test_a_tfrecord_of_other_records_is_named(tmp_path, data_config):
    path = str(tmp_path / "other.tfrecord")
    tfrecord_files.write_records(path, [b"\xff\xfe not a proto"])
    config = tfrecord_config(data_config, train=path, eval_files=path)
    with pytest.raises(tfrecords.TFRecordError, match=r"other\.tfrecord: the first record"):
        tfrecords.read_pretraining_dataset(config, split="eval", batch_size=2, seed=0)


def test_empty_files_only_is_an_error(tmp_path, data_config):
    path = str(tmp_path / "empty.tfrecord")
    tfrecord_files.write_records(path, [])
    config = tfrecord_config(data_config, train=path, eval_files=path)
    with pytest.raises(tfrecords.TFRecordError, match=r"no records in .*empty\.tfrecord"):
        tfrecords.read_pretraining_dataset(config, split="eval", batch_size=2, seed=0)


def test_masked_crc32c_matches_tfrecord_writer(tmp_path):
    path = str(tmp_path / "one.tfrecord")
    payload = b"hello tfrecord"
    tfrecord_files.write_records(path, [payload])
    data = pathlib.Path(path).read_bytes()
    assert data[12 : 12 + len(payload)] == payload
    assert int.from_bytes(data[8:12], "little") == tfrecords._masked_crc32c(data[:8])
    assert int.from_bytes(data[-4:], "little") == tfrecords._masked_crc32c(payload)


def test_packed_records_keep_each_record_whole_with_its_masks(tmp_path, data_config):
    instances = random_instances(48)
    lengths = instances["input_mask"].sum(axis=1)
    weights = instances["masked_lm_weights"] > 0
    # Masked positions inside each record, so that each lands on a token of its own.
    positions = np.minimum(instances["masked_lm_positions"], lengths[:, None] - 1)
    instances["masked_lm_positions"] = np.where(weights, positions, 0).astype(np.int32)
    glob = write_files(tmp_path, "eval", instances, num_files=2)
    config = tfrecord_config(data_config, eval_files=glob, pack_examples=True)
    dataset = tfrecords.read_pretraining_dataset(config, split="eval", batch_size=1, seed=0)
    rows = list(dataset.as_numpy_iterator())
    seen = []
    for row in rows:
        row = {name: value[0] for name, value in row.items()}
        assert set(row) == set(schema.features(packed=True))
        predicted = row["masked_lm_positions"][row["masked_lm_weights"] > 0]
        assert len(predicted) <= PREDICTIONS
        for k in np.flatnonzero(row["next_sentence_weights"]):
            start, end = (
                row["cls_positions"][k],
                row["cls_positions"][k] + (row["input_mask"] == k + 1).sum(),
            )
            i = int(row["input_ids"][start + 1])  # the record's number
            seen.append(i)
            np.testing.assert_array_equal(
                row["input_ids"][start:end], instances["input_ids"][i, : end - start]
            )
            np.testing.assert_array_equal(
                row["segment_ids"][start:end], instances["segment_ids"][i, : end - start]
            )
            assert row["next_sentence_labels"][k] == instances["next_sentence_labels"][i]
            mine = (predicted >= start) & (predicted < end)
            np.testing.assert_array_equal(
                predicted[mine] - start, instances["masked_lm_positions"][i][weights[i]]
            )
            ids = row["masked_lm_ids"][row["masked_lm_weights"] > 0][mine]
            np.testing.assert_array_equal(ids, instances["masked_lm_ids"][i][weights[i]])
    assert sorted(seen) == list(range(48))
    assert len(rows) < 0.75 * 48
