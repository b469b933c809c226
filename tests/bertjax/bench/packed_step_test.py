"""bertjax.bench.packed_step's count of the examples a batch holds. (measure() builds and
times two real runs; tests/bertjax/tasks/finetune_test.py runs it on a fine-tuning
workdir.)"""

import numpy as np

from bertjax.bench import packed_step


def test_a_pretraining_batch_holds_its_weighted_sentence_pairs():
    batch = {
        "input_ids": np.ones((2, 16), np.int32),
        "next_sentence_weights": np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], np.float32),
    }
    assert packed_step._examples(batch) == 5


def test_a_fine_tuning_batch_holds_its_weighted_examples_packed_or_not():
    rows = np.ones((3, 16), np.int32)
    padded = {"input_ids": rows, "example_weight": np.array([1.0, 1.0, 0.0], np.float32)}
    assert packed_step._examples(padded) == 2
    packed = {"input_ids": rows[:2], "example_weight": np.array([[1.0, 1.0], [1.0, 0.0]])}
    assert packed_step._examples(packed) == 3


def test_an_unpacked_pretraining_batch_holds_one_pair_a_row():
    batch = {"input_ids": np.ones((4, 16), np.int32), "next_sentence_labels": np.zeros(4)}
    assert packed_step._examples(batch) == 4
