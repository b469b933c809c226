"""A run's input as streams read by any number of hosts: a checkpoint's positions resume
on another host count with the global batches of the uninterrupted run, batch for
batch, on a stand-in stream and on the real pretraining pipeline."""

import dataclasses
import functools
import hashlib
import json

import numpy as np
import pytest
import support
import tensorflow as tf

from data_pipeline import pretraining_input, streams
from data_pipeline.finetune import classification_config


@pytest.mark.parametrize(
    "count, hosts, ids, parts",
    [
        (1, 1, [[0]], [(0, 1)]),
        (2, 1, [[0, 1]], [(0, 1)]),
        (4, 2, [[0, 1], [2, 3]], [(0, 1)] * 2),
        (1, 2, [[0], [0]], [(0, 2), (1, 2)]),
        (2, 4, [[0], [0], [1], [1]], [(0, 2), (1, 2), (0, 2), (1, 2)]),
    ],
)
def test_each_host_reads_whole_streams_or_its_part_of_one(count, hosts, ids, parts):
    plans = [streams.plan(count, hosts, host) for host in range(hosts)]
    assert [list(p.ids) for p in plans] == ids
    assert [p.part for p in plans] == parts


def test_counts_that_do_not_divide_have_no_plan():
    assert streams.plan(3, 2, 0) is None
    assert streams.plan(2, 3, 0) is None


def counting(batch_size, process_index, process_count, seed, position=None):
    """A stand-in stream: row values stream * 1000 + n, n counting from `position`."""
    del process_count, seed
    start = 0 if position is None else int(position[0]) + 1
    rows = tf.data.Dataset.range(start, 10**6).map(
        lambda n: {"x": process_index * 1000 + n, streams.POSITION: tf.reshape(n, [1])}
    )
    return rows.batch(batch_size, drop_remainder=True)


def global_batches(make, count, hosts, *, batch_size, steps, positions=None):
    """The global batches of `hosts` hosts reading `count` streams: their host batches,
    in host order."""
    iterators = [
        streams.host_batches(
            make,
            streams.plan(count, hosts, host),
            batch_size=batch_size,
            seed=0,
            positions=positions,
        ).as_numpy_iterator()
        for host in range(hosts)
    ]
    out = []
    for _ in range(steps):
        batches = [next(iterator) for iterator in iterators]
        names = [n for n in batches[0] if n != streams.POSITIONS]
        merged = {n: np.concatenate([b[n] for b in batches]) for n in names}
        positions_now = streams.gather(
            np.stack([b[streams.POSITIONS] for b in batches]),
            [streams.plan(count, hosts, host) for host in range(hosts)],
        )
        out.append((merged, positions_now))
    return out


def test_host_batches_are_read_without_tf_datas_autotuning_thread():
    # With the thread, deleting the iterator at a run's end waited for its next wake-up
    # (18 s after a 100-step run, up to a minute after a long one).
    dataset = streams.host_batches(counting, streams.plan(1, 1, 0), batch_size=4, seed=0)
    assert dataset.options().autotune.enabled is False
    assert next(dataset.as_numpy_iterator())["x"].tolist() == [0, 1, 2, 3]


def digest(batch: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(batch):
        h.update(name.encode() + np.ascontiguousarray(batch[name]).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("count, before, after", [(2, 2, 1), (1, 1, 2), (4, 2, 4), (4, 4, 1)])
def test_a_stand_in_stream_resumes_on_another_host_count_batch_for_batch(count, before, after):
    straight = global_batches(counting, count, before, batch_size=8, steps=6)
    _, positions = straight[2]
    resumed = global_batches(counting, count, after, batch_size=8, steps=3, positions=positions)
    assert [digest(b) for b, _ in resumed] == [digest(b) for b, _ in straight[3:]]
    assert [p for _, p in resumed] == [p for _, p in straight[3:]]
    # Stream s's rows, in order, fill its block of every global batch.
    first = straight[0][0]["x"].reshape(count, -1)
    assert [row[0] // 1000 for row in first] == list(range(count))


@pytest.fixture
def pretraining(data_config, small_vocab_file):
    data_config.vocab_file = small_vocab_file
    data_config.max_seq_length = 64
    data_config.max_predictions_per_seq = 10
    data_config.document_buffer_size = 16
    return functools.partial(pretraining_input.make_pretraining_dataset, data_config, split="train")


@pytest.mark.slow
@pytest.mark.parametrize("count, before, after", [(2, 2, 1), (1, 1, 2)])
def test_the_pretraining_stream_resumes_on_another_host_count_batch_for_batch(
    pretraining, count, before, after
):
    straight = global_batches(pretraining, count, before, batch_size=8, steps=7)
    _, positions = straight[3]
    resumed = global_batches(pretraining, count, after, batch_size=8, steps=3, positions=positions)
    assert [digest(b) for b, _ in resumed] == [digest(b) for b, _ in straight[4:]]
    assert len({digest(b) for b, _ in straight}) == 7  # batches that differ


@pytest.fixture
def tfrecord_pretraining(tmp_path, data_config):
    from tfrecords_test import LENGTH, PREDICTIONS, random_instances, write_files

    data_config.source = "tfrecord"
    data_config.tfrecord_train_files = write_files(tmp_path, "train", random_instances(96), 4)
    data_config.max_seq_length = LENGTH
    data_config.max_predictions_per_seq = PREDICTIONS
    data_config.shuffle_buffer_size = 16
    return functools.partial(pretraining_input.make_pretraining_dataset, data_config, split="train")


@pytest.fixture
def classification(tokenizer):
    from data_pipeline.finetune import classification_input

    mrpc = support.TESTDATA / "finetune"
    task = classification_input.load_classification_task(
        classification_config.ClassificationConfig(
            train_file=str(mrpc / "mrpc_train.tsv"),
            eval_file=str(mrpc / "mrpc_dev.tsv"),
            text_a="#1 String",
            text_b="#2 String",
            label="Quality",
            max_seq_length=32,
        )
    )

    def make(**batching):
        dataset, _ = classification_input.make_classification_dataset(
            task, tokenizer, split="train", num_epochs=100, **batching
        )
        return dataset

    return make


@pytest.mark.slow
@pytest.mark.parametrize("count, before, after", [(2, 2, 1), (1, 1, 2)])
@pytest.mark.parametrize("stream", ["tfrecord_pretraining", "classification"])
def test_the_tfrecord_and_fine_tuning_streams_resume_on_another_host_count(
    request, stream, count, before, after
):
    make = request.getfixturevalue(stream)
    straight = global_batches(make, count, before, batch_size=4, steps=7)
    _, positions = straight[3]
    resumed = global_batches(make, count, after, batch_size=4, steps=3, positions=positions)
    assert [digest(b) for b, _ in resumed] == [digest(b) for b, _ in straight[4:]]
    assert len({digest(b) for b, _ in straight}) > 1


# Two streams' positions of a stand-in source, and the config they were made from.
MEANING = streams.Positions(("batches", "epoch"), {"seed": 0, "data.source": "builtin"})
WHERE = "WORKDIR: checkpoint 3"


def test_a_checkpoints_positions_come_back_from_its_record():
    record = json.loads(json.dumps(MEANING.record([[3, 1], [3, 2]])))
    assert record["version"] == streams.POSITIONS_VERSION
    assert MEANING.read(record, WHERE) == [[3, 1], [3, 2]]


def _with(record: dict, **values) -> dict:
    return {**record, **values}


@pytest.mark.parametrize(
    "saved, meaning, message",
    [
        # Bare integers, as a bertjax before the record saved them.
        ([[3, 1], [3, 2]], MEANING, "carry no format version (saved by an older bertjax)"),
        (
            _with(MEANING.record([[3, 1]]), version=1),
            MEANING,
            "are of format 1, this bertjax reads format 2",
        ),
        (
            _with(MEANING.record([[3, 1]]), hosts=2),
            MEANING,
            "hold config, fields, files, hosts, positions, version, format 2 holds",
        ),
        # A field renamed, or one added: the positions count something else.
        (
            MEANING.record([[3, 1]]),
            dataclasses.replace(MEANING, fields=("batches", "epochs")),
            "count (batches, epoch), this run's stream counts (batches, epochs); resume it with the bertjax",
        ),
        (
            MEANING.record([[3, 1]]),
            dataclasses.replace(MEANING, fields=("batches", "epoch", "chunk")),
            "count (batches, epoch), this run's stream counts (batches, epoch, chunk)",
        ),
        (
            MEANING.record([[3, 1]]),
            dataclasses.replace(MEANING, config={"seed": 1, "data.source": "builtin"}),
            "made with config.seed=0, this run's with 1; resume it with the config that saved it",
        ),
        (
            MEANING.record([[3, 1]]),
            dataclasses.replace(MEANING, config={"seed": 0}),
            "made with config.data.source='builtin', this run's with '(none)'",
        ),
        # The config's globs now match another file.
        (
            MEANING.record([[3, 1]]),
            dataclasses.replace(MEANING, files={"count": 3, "digest": "0123456789abcdef"}),
            "are of streams over 0 files (digest e3b0c44298fc1c14), this run's over 3 (digest "
            "0123456789abcdef): the files the config names changed since",
        ),
        (MEANING.record([[3]]), MEANING, "are not 2 integers for each stream"),
        (MEANING.record([]), MEANING, "are not 2 integers for each stream"),
    ],
)
def test_positions_that_mean_something_else_are_refused_in_one_line(saved, meaning, message):
    with pytest.raises(streams.PositionError) as refused:
        meaning.read(json.loads(json.dumps(saved)), WHERE)
    assert str(refused.value).startswith(f"{WHERE}: its stream positions ")
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_files_read_are_told_apart_by_their_paths_sizes_and_order(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("one\n")
    b.write_text("two\n")
    both = streams.files_read([str(a), str(b)])
    assert both["count"] == 2 and len(both["digest"]) == 16
    assert streams.files_read([str(a), str(b)]) == both
    assert streams.files_read([str(b), str(a)]) != both
    assert streams.files_read([str(a)]) != both
    b.write_text("two and more\n")
    assert streams.files_read([str(a), str(b)]) != both


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("stream", ["pretraining", "tfrecord_pretraining"])
def test_a_pretraining_source_names_each_integer_of_its_positions(request, stream, packed):
    make = request.getfixturevalue(stream)
    data_config = make.args[0]
    data_config.pack_examples = packed
    spec = make(batch_size=4, seed=0).element_spec[streams.POSITION]
    assert spec.shape[-1] == len(pretraining_input.position_fields(data_config))
