"""bertjax.bench.packed_step's count of the examples a batch holds. (measure() builds and
times two real runs; tests/bertjax/tasks/finetune_test.py runs it on a fine-tuning
workdir.)"""

import numpy as np

from bertjax.bench import packed_step


def test_a_packed_pretraining_batch_holds_the_sequences_its_input_mask_numbers():
    # input_mask numbers each row's sequences: 2 in the first row, 3 in the second.
    batch = {
        "input_ids": np.ones((2, 8), np.int32),
        "input_mask": np.array([[1, 1, 2, 2, 0, 0, 0, 0], [1, 2, 2, 3, 3, 3, 0, 0]], np.int32),
    }
    assert packed_step._examples(batch) == 5


def test_a_fine_tuning_batch_holds_its_weighted_examples_packed_or_not():
    rows = np.ones((3, 16), np.int32)
    padded = {"input_ids": rows, "example_weight": np.array([1.0, 1.0, 0.0], np.float32)}
    assert packed_step._examples(padded) == 2
    packed = {"input_ids": rows[:2], "example_weight": np.array([[1.0, 1.0], [1.0, 0.0]])}
    assert packed_step._examples(packed) == 3


def test_an_unpacked_pretraining_batch_holds_one_sequence_a_row():
    mask = np.array([[1] * 16, [1] * 10 + [0] * 6, [1] * 16, [1] * 3 + [0] * 13], np.int32)
    batch = {"input_ids": np.ones((4, 16), np.int32), "input_mask": mask}
    assert packed_step._examples(batch) == 4
