"""The fine-tuning data kit: options, label order, file records, batching."""

import dataclasses
import types

import numpy as np
import pytest

from data_pipeline import config as config_lib
from data_pipeline.errors import ConfigError
from data_pipeline.finetune import (
    classification_config,
    records,
    squad_config,
    tagging_config,
)
from data_pipeline.finetune.records import TaskDataError


def batches(dataset) -> list:
    return list(dataset.as_numpy_iterator())


# ----------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "module, config_class",
    [
        (classification_config, classification_config.ClassificationConfig),
        (tagging_config, tagging_config.TaggingConfig),
        (squad_config, squad_config.SquadConfig),
        (config_lib, config_lib.DataConfig),
    ],
)
def test_default_config_is_the_dataclass_defaults(module, config_class):
    data = module.default_config()
    fields = dataclasses.fields(config_class)
    assert data.to_dict() == {field.name: field.default for field in fields}


def test_sorted_labels():
    assert records.sorted_labels(["10", "2", "-1", "2"]) == ("-1", "2", "10")
    assert records.sorted_labels(["b", "10", "a"]) == ("10", "a", "b")


def test_task_split():
    task = types.SimpleNamespace(train="train rows", eval=None)
    assert records.task_split(task, "train") == "train rows"
    with pytest.raises(ConfigError, match=r"config\.data\.eval_file='': no eval split configured"):
        records.task_split(task, "eval")
    with pytest.raises(ValueError, match="must be one of train, eval"):
        records.task_split(task, "test")


# ----------------------------------------------------------------------------- files


def test_read_records_by_extension(tmp_path):
    columns = [("text_a", "text"), ("label", "label")]
    tsv = tmp_path / "a.tsv"
    tsv.write_text("label\ttext\n\nx\tone\ny\ttwo\n")
    assert list(records.read_records(str(tsv), columns)) == [
        (3, ["one", "x"]),
        (4, ["two", "y"]),
    ]
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"text": "one", "label": 1}\n')
    assert list(records.read_records(str(jsonl), columns)) == [(1, ["one", 1])]
    with pytest.raises(TaskDataError, match=r"a\.txt: unknown format; use one of \.tsv"):
        records.read_records(str(tmp_path / "a.txt"), columns)


# ----------------------------------------------------------------------------- batching


def test_eval_every_example_once_across_processes():
    for num_examples, batch_size, process_count in [(5, 2, 1), (5, 2, 2), (9, 3, 2), (4, 2, 2)]:
        seen, sizes = [], set()
        for process_index in range(process_count):
            dataset, info = records.batch_indices(
                num_examples,
                training=False,
                batch_size=batch_size,
                process_index=process_index,
                process_count=process_count,
                seed=0,
                num_epochs=1,
            )
            got = batches(dataset)
            sizes.add(len(got))
            assert len(got) == info.num_batches
            for indices, weights in got:
                seen.extend(indices[weights > 0].tolist())
                assert indices[weights == 0].tolist() == [0] * int(np.sum(weights == 0))
        assert sizes == {-(-num_examples // (batch_size * process_count))}
        assert sorted(seen) == list(range(num_examples))


def test_train_order_is_shared_by_processes():
    def order(process_index, process_count, batch_size, seed=7):
        dataset, info = records.batch_indices(
            10,
            training=True,
            batch_size=batch_size,
            process_index=process_index,
            process_count=process_count,
            seed=seed,
            num_epochs=2,
        )
        got = [indices for indices, *_ in batches(dataset)]
        assert len(got) == info.num_batches
        return got

    single = order(0, 1, 4)  # int(10 / 4 * 2) = 5 batches from 20 indices
    assert len(single) == 5
    stream = np.concatenate(single)
    assert sorted(stream[:10]) == list(range(10))  # the first epoch is a permutation
    assert sorted(stream[10:]) == list(range(10))  # and so is the second, in another order
    assert not np.array_equal(stream[:10], stream[10:])
    halves = [order(0, 2, 2), order(1, 2, 2)]
    np.testing.assert_array_equal(
        np.concatenate([np.concatenate(pair) for pair in zip(*halves, strict=True)]), stream
    )
    assert not np.array_equal(np.concatenate(order(0, 1, 4, seed=8)), stream)


def test_fractional_epochs_and_too_small_a_split():
    _, info = records.batch_indices(
        10, training=True, batch_size=4, process_index=0, process_count=1, seed=0, num_epochs=0.5
    )
    assert info.num_batches == 1
    with pytest.raises(ValueError, match="no global batch of 16"):
        records.batch_indices(
            10, training=True, batch_size=8, process_index=0, process_count=2, seed=0, num_epochs=1
        )


@pytest.mark.parametrize(
    "length, count, lengths",
    [(256, 3, (64, 128, 256)), (64, 3, (16, 32, 64)), (30, 3, (8, 16, 30)), (64, 1, (64,)),
     (6, 3, (6,)), (16, 5, (8, 16))],
)  # fmt: skip
def test_bucket_lengths_are_the_maximum_and_its_halvings_in_multiples_of_8(length, count, lengths):
    assert records.bucket_lengths(length, count) == lengths


@pytest.mark.parametrize(
    "tokens, length, width",
    [(1, 128, 16), (16, 128, 16), (17, 128, 32), (100, 128, 128), (100, 96, 96)],
)
def test_power_of_two_width_is_at_least_16_and_at_most_the_length(tokens, length, width):
    assert records.power_of_two_width(tokens, length) == width
