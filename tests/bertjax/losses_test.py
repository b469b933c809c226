"""bertjax.losses against sums written out by hand with NumPy, jitted as a step runs them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax import losses


def log_softmax(logits) -> np.ndarray:
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def nll(logits, label) -> float:
    return -float(log_softmax(logits)[label])


def as_floats(sums) -> dict[str, float]:
    return {key: float(value) for key, value in sums.items()}


def assert_sums(actual, expected):
    assert set(actual) == set(expected)
    np.testing.assert_allclose(
        [float(actual[key]) for key in expected], list(expected.values()), rtol=1e-6, atol=1e-6
    )


# Two examples of two masked positions over a vocabulary of three; the second example's
# second position is padding (weight 0) with logits that would dominate any sum.
MLM_LOGITS = np.array(
    [[[2.0, 1.0, 0.0], [0.0, 0.5, 3.0]], [[1.0, 1.5, -1.0], [50.0, -50.0, 0.0]]], np.float32
)
MLM_IDS = np.array([[0, 1], [1, 1]], np.int32)
MLM_WEIGHTS = np.array([[1.0, 1.0], [1.0, 0.0]], np.float32)
NSP_LOGITS = np.array([[0.3, -0.2], [-1.0, 2.0]], np.float32)
NSP_LABELS = np.array([0, 0], np.int32)


def pretraining_batch() -> dict:
    return {
        "masked_lm_ids": jnp.asarray(MLM_IDS),
        "masked_lm_weights": jnp.asarray(MLM_WEIGHTS),
        "next_sentence_labels": jnp.asarray(NSP_LABELS),
    }


def test_pretraining_sums_count_the_weighted_masked_positions_and_every_example():
    sums = jax.jit(losses.pretraining_sums)(
        jnp.asarray(MLM_LOGITS), jnp.asarray(NSP_LOGITS), pretraining_batch()
    )
    mlm_loss = nll([2.0, 1.0, 0.0], 0) + nll([0.0, 0.5, 3.0], 1) + nll([1.0, 1.5, -1.0], 1)
    nsp_loss = nll([0.3, -0.2], 0) + nll([-1.0, 2.0], 0)
    assert_sums(
        sums,
        {
            "mlm_loss_sum": mlm_loss,
            "mlm_correct": 2.0,  # positions 1 and 3 right, 2 wrong, 4 weighs nothing
            "mlm_weight": 3.0,
            "nsp_loss_sum": nsp_loss,
            "nsp_correct": 1.0,
            "nsp_count": 2.0,
        },
    )
    assert set(sums) == set(losses.SUM_KEYS)
    assert all(value.dtype == jnp.float32 for value in sums.values())


def test_pretraining_sums_are_float32_for_bfloat16_logits():
    sums = jax.jit(losses.pretraining_sums)(
        jnp.asarray(MLM_LOGITS, jnp.bfloat16),
        jnp.asarray(NSP_LOGITS, jnp.bfloat16),
        pretraining_batch(),
    )
    assert all(value.dtype == jnp.float32 for value in sums.values())
    assert float(sums["mlm_correct"]) == 2.0


def test_sums_of_two_half_batches_add_up_to_the_whole_batch():
    whole = jax.jit(losses.pretraining_sums)(
        jnp.asarray(MLM_LOGITS), jnp.asarray(NSP_LOGITS), pretraining_batch()
    )
    halves = [
        jax.jit(losses.pretraining_sums)(
            jnp.asarray(MLM_LOGITS[rows]),
            jnp.asarray(NSP_LOGITS[rows]),
            {key: value[rows] for key, value in pretraining_batch().items()},
        )
        for rows in (slice(0, 1), slice(1, 2))
    ]
    assert_sums(whole, {key: float(halves[0][key] + halves[1][key]) for key in losses.SUM_KEYS})
    for key in ("mlm_correct", "mlm_weight", "nsp_correct", "nsp_count"):
        assert float(whole[key]) == float(halves[0][key]) + float(halves[1][key])


def test_packed_nsp_counts_only_the_sequences_its_weights_mark():
    # One row holding one sequence pair in slot 0; slot 1 is empty.
    nsp_logits = jnp.asarray([[[0.3, -0.2], [9.0, -9.0]]], jnp.float32)
    batch = {
        "masked_lm_ids": jnp.zeros((1, 1), jnp.int32),
        "masked_lm_weights": jnp.ones((1, 1), jnp.float32),
        "next_sentence_labels": jnp.asarray([[1, 1]], jnp.int32),
        "next_sentence_weights": jnp.asarray([[1.0, 0.0]], jnp.float32),
    }
    sums = jax.jit(losses.pretraining_sums)(jnp.zeros((1, 1, 3)), nsp_logits, batch)
    assert float(sums["nsp_count"]) == 1.0
    assert float(sums["nsp_correct"]) == 0.0
    np.testing.assert_allclose(float(sums["nsp_loss_sum"]), nll([0.3, -0.2], 1), rtol=1e-6)
    np.testing.assert_allclose(float(sums["mlm_loss_sum"]), np.log(3.0), rtol=1e-6)


def test_nsp_weights_are_ones_per_example_unless_the_batch_is_packed():
    labels = jnp.asarray([1, 0, 1], jnp.int32)
    ones = losses.nsp_weights({"next_sentence_labels": labels})
    assert ones.dtype == jnp.float32
    np.testing.assert_array_equal(ones, [1.0, 1.0, 1.0])
    packed = {
        "next_sentence_labels": jnp.zeros((2, 2), jnp.int32),
        "next_sentence_weights": jnp.asarray([[1, 0], [1, 1]], jnp.int32),
    }
    weights = losses.nsp_weights(packed)
    assert weights.dtype == jnp.float32
    np.testing.assert_array_equal(weights, [[1.0, 0.0], [1.0, 1.0]])


def test_total_loss_divides_by_the_denominators_given():
    sums = {"mlm_loss_sum": jnp.float32(6.0), "nsp_loss_sum": jnp.float32(3.0)}
    # The whole batch's denominators, not this microbatch's.
    assert float(losses.total_loss(sums, mlm_weight=4.0, nsp_count=2.0)) == 6.0 / 4.0 + 3.0 / 2.0
    # No masked position at all: the MLM sum is not divided by zero.
    no_mlm = {"mlm_loss_sum": jnp.float32(0.0), "nsp_loss_sum": jnp.float32(3.0)}
    assert float(losses.total_loss(no_mlm, mlm_weight=0.0, nsp_count=2.0)) == 1.5


def test_summarize_gives_means_from_sums():
    sums = {
        "mlm_loss_sum": np.float32(6.0),
        "mlm_correct": jnp.float32(1.0),
        "mlm_weight": np.float32(4.0),
        "nsp_loss_sum": np.float32(1.0),
        "nsp_correct": np.float32(1.0),
        "nsp_count": np.float32(2.0),
    }
    summary = losses.summarize(sums)
    assert summary == pytest.approx(
        {
            "loss": 1.5 + 0.5,
            "mlm_loss": 1.5,
            "mlm_accuracy": 0.25,
            "mlm_perplexity": np.exp(1.5),
            "nsp_loss": 0.5,
            "nsp_accuracy": 0.5,
        }
    )
    assert all(type(value) is float for value in summary.values())


def test_summarize_of_empty_sums_is_zero_and_a_huge_loss_keeps_perplexity_finite():
    empty = losses.summarize({key: 0.0 for key in losses.SUM_KEYS})
    assert empty == {
        "loss": 0.0,
        "mlm_loss": 0.0,
        "mlm_accuracy": 0.0,
        "mlm_perplexity": 1.0,
        "nsp_loss": 0.0,
        "nsp_accuracy": 0.0,
    }
    huge = losses.summarize({**{key: 1.0 for key in losses.SUM_KEYS}, "mlm_loss_sum": 1e4})
    assert huge["mlm_perplexity"] == pytest.approx(np.exp(80.0))


def test_masked_lm_alone_sums_divides_and_summarizes_without_nsp():
    batch = pretraining_batch()
    del batch["next_sentence_labels"]  # masked LM alone: batches carry no NSP labels
    sums = jax.jit(losses.pretraining_sums)(jnp.asarray(MLM_LOGITS), None, batch)
    mlm_loss = nll([2.0, 1.0, 0.0], 0) + nll([0.0, 0.5, 3.0], 1) + nll([1.0, 1.5, -1.0], 1)
    expected = {"mlm_loss_sum": mlm_loss, "mlm_correct": 2.0, "mlm_weight": 3.0}
    assert_sums(sums, expected)
    assert set(sums) == set(losses.MLM_SUM_KEYS)
    # The loss is the MLM mean alone, over the whole batch's masked positions.
    loss = losses.total_loss(sums, mlm_weight=6.0, nsp_count=None)
    assert float(loss) == pytest.approx(mlm_loss / 6.0)
    summary = losses.summarize(sums)
    assert summary == pytest.approx(
        {
            "loss": mlm_loss / 3.0,
            "mlm_loss": mlm_loss / 3.0,
            "mlm_accuracy": 2.0 / 3.0,
            "mlm_perplexity": np.exp(mlm_loss / 3.0),
        }
    )


# ------------------------------------------------------------------ fine-tuning

CLASS_LOGITS = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0], [7.0, 0.0, 0.0]], np.float32)
CLASS_LABELS = np.array([1, 0, 2], np.int32)
# The third row pads an eval batch.
EXAMPLE_WEIGHTS = np.array([1.0, 1.0, 0.0], np.float32)


def test_classification_sums_leave_out_padding_rows():
    batch = {"label": jnp.asarray(CLASS_LABELS), "example_weight": jnp.asarray(EXAMPLE_WEIGHTS)}
    sums = jax.jit(losses.classification_sums)(jnp.asarray(CLASS_LOGITS), batch)
    assert_sums(
        sums,
        {
            "loss_sum": nll([1.0, 2.0, 0.5], 1) + nll([0.0, -1.0, 3.0], 0),
            "correct": 1.0,
            "weight": 2.0,
        },
    )


def test_classification_sums_of_two_half_batches_add_up_to_the_whole_batch():
    def sums(rows):
        batch = {
            "label": jnp.asarray(CLASS_LABELS[rows]),
            "example_weight": jnp.asarray(EXAMPLE_WEIGHTS[rows]),
        }
        return jax.jit(losses.classification_sums)(jnp.asarray(CLASS_LOGITS[rows]), batch)

    whole, first, second = sums(slice(0, 3)), sums(slice(0, 1)), sums(slice(1, 3))
    assert_sums(whole, {key: float(first[key] + second[key]) for key in losses.FINETUNE_SUM_KEYS})


def test_regression_sums_are_weighted_squared_errors():
    batch = {
        "label": jnp.asarray([1.0, 4.0, 2.5], jnp.float32),
        "example_weight": jnp.asarray(EXAMPLE_WEIGHTS),
    }
    logits = jnp.asarray([[1.5], [2.0], [100.0]], jnp.float32)
    assert as_floats(jax.jit(losses.regression_sums)(logits, batch)) == {
        "loss_sum": 0.5**2 + 2.0**2,
        "correct": 0.0,
        "weight": 2.0,
    }


def test_packed_regression_sums_read_one_output_per_slot():
    batch = {
        "label": jnp.asarray([[1.0, 3.0], [2.0, 0.0]], jnp.float32),
        "example_weight": jnp.asarray([[1.0, 1.0], [1.0, 0.0]], jnp.float32),
    }
    logits = jnp.asarray([[[0.0], [3.5]], [[2.0], [-8.0]]], jnp.float32)
    assert as_floats(jax.jit(losses.regression_sums)(logits, batch)) == {
        "loss_sum": 1.0 + 0.25 + 0.0,
        "correct": 0.0,
        "weight": 3.0,
    }


def test_token_weights_multiply_label_weights_by_their_examples_weight():
    batch = {
        "label_weights": jnp.asarray([[1, 1, 0], [1, 0, 1]], jnp.int32),
        "example_weight": jnp.asarray([1.0, 0.0], jnp.float32),
    }
    weights = losses.token_weights(batch)
    assert weights.dtype == jnp.float32
    np.testing.assert_array_equal(weights, [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])


def test_packed_token_weights_follow_the_example_each_token_belongs_to():
    # Row 0 packs example 1 (kept) and example 2 (padding, weight 0), then a pad token;
    # row 1 holds one kept example.
    batch = {
        "input_mask": jnp.asarray([[1, 1, 2, 2, 0], [1, 1, 1, 0, 0]], jnp.int32),
        "label_weights": jnp.asarray([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], jnp.float32),
        "example_weight": jnp.asarray([[1.0, 0.0], [1.0, 0.0]], jnp.float32),
    }
    np.testing.assert_array_equal(losses.token_weights(batch), [[1, 1, 0, 0, 0], [0, 1, 1, 0, 0]])


def test_tagging_sums_count_the_labelled_tokens_of_kept_examples():
    logits = np.array(
        [
            [[2.0, 0.0], [0.0, 1.0], [5.0, 0.0]],
            [[0.0, 3.0], [1.0, 0.0], [0.0, 0.0]],
        ],
        np.float32,
    )
    batch = {
        "label_ids": jnp.asarray([[0, 0, 1], [1, 0, 0]], jnp.int32),
        "label_weights": jnp.asarray([[1, 1, 0], [1, 1, 1]], jnp.int32),
        "example_weight": jnp.asarray([1.0, 0.0], jnp.float32),
    }
    assert_sums(
        jax.jit(losses.tagging_sums)(jnp.asarray(logits), batch),
        {"loss_sum": nll([2.0, 0.0], 0) + nll([0.0, 1.0], 0), "correct": 1.0, "weight": 2.0},
    )


def test_span_sums_take_each_softmax_over_the_examples_own_tokens():
    # Three tokens of text, then two of padding whose huge logits must not count.
    start = np.array([[1.0, 2.0, 0.0, 90.0, 90.0], [0.0, 0.0, 4.0, 0.0, 0.0]], np.float32)
    end = np.array([[0.0, 0.5, 1.0, 90.0, 90.0], [3.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
    batch = {
        "input_mask": jnp.asarray([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], jnp.int32),
        "start_positions": jnp.asarray([1, 2], jnp.int32),
        "end_positions": jnp.asarray([2, 1], jnp.int32),
        "example_weight": jnp.asarray([1.0, 1.0], jnp.float32),
    }
    sums = jax.jit(losses.span_sums)((jnp.asarray(start), jnp.asarray(end)), batch)
    loss = (nll(start[0, :3], 1) + nll(end[0, :3], 2) + nll(start[1], 2) + nll(end[1], 1)) / 2
    # Both of the first example's ends are right; the second's end is not.
    assert_sums(sums, {"loss_sum": loss, "correct": 1.0, "weight": 2.0})


def test_packed_span_sums_equal_the_unpacked_examples_sums():
    start = np.array([0.5, 2.0, -1.0, 1.0, 3.0, 0.0], np.float32)
    end = np.array([1.0, 0.0, 2.0, 0.0, 0.5, 7.0], np.float32)
    # Example 1 holds tokens 0-2 (answer 1..2), example 2 tokens 3-4 (answer 4..4),
    # slot 3 is empty and token 5 is padding.
    packed = {
        "input_mask": jnp.asarray([[1, 1, 1, 2, 2, 0]], jnp.int32),
        "start_positions": jnp.asarray([[1, 4, 0]], jnp.int32),
        "end_positions": jnp.asarray([[2, 4, 0]], jnp.int32),
        "example_weight": jnp.asarray([[1.0, 1.0, 0.0]], jnp.float32),
    }
    sums = jax.jit(losses.span_sums)((jnp.asarray(start[None]), jnp.asarray(end[None])), packed)
    loss = (nll(start[:3], 1) + nll(end[:3], 2) + nll(start[3:5], 1) + nll(end[3:5], 1)) / 2
    assert_sums(sums, {"loss_sum": loss, "correct": 2.0, "weight": 2.0})
    assert np.isfinite(float(sums["loss_sum"]))


def test_summarize_finetune_gives_mean_loss_and_accuracy():
    summary = losses.summarize_finetune(
        {"loss_sum": jnp.float32(3.0), "correct": np.float32(3.0), "weight": jnp.float32(4.0)}
    )
    assert summary == {"loss": 0.75, "accuracy": 0.75}
    assert losses.summarize_finetune({"loss_sum": 0.0, "correct": 0.0, "weight": 0.0}) == {
        "loss": 0.0,
        "accuracy": 0.0,
    }


# ------------------------------------------------------------------ in-batch negatives


def retrieval_batch(rows=8, width=2, dim=16, seed=0):
    """Random query and passage vectors, and distinct texts (keys) for every one."""
    rng = np.random.default_rng(seed)
    outputs = (
        rng.normal(size=(rows, dim)).astype(np.float32),
        rng.normal(size=(rows, width, dim)).astype(np.float32),
    )
    batch = {
        "query_key": np.arange(rows, dtype=np.int32),
        "passage_keys": np.arange(rows * width, dtype=np.int32).reshape(rows, width),
        "example_weight": np.ones(rows, np.float32),
    }
    return outputs, batch


def reference_loss(queries, passages, scale, hidden=()):
    """Mean cross-entropy of each query over every passage of the batch, in NumPy;
    `hidden` holds (query, candidate) pairs that are not negatives."""
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    rows, width, _ = passages.shape
    logits = scale * unit(queries) @ unit(passages.reshape(rows * width, -1)).T
    for i, j in hidden:
        logits[i, j] = -np.inf
    target = np.arange(rows) * width
    top = logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
    return np.mean(log_z - logits[np.arange(rows), target])


def mean_loss(sums):
    return float(sums["loss_sum"] / sums["weight"])


def test_in_batch_negatives_is_the_cross_entropy_over_every_passage_of_the_batch():
    outputs, batch = retrieval_batch()
    sums = losses.in_batch_negatives_sums(outputs, batch, scale=20.0)
    np.testing.assert_allclose(mean_loss(sums), reference_loss(*outputs, 20.0), rtol=1e-5)
    assert 0 <= float(sums["correct"]) <= 8


def test_a_repeated_positive_and_another_positive_of_the_query_are_not_negatives():
    outputs, batch = retrieval_batch(rows=4, width=2)
    batch["passage_keys"][2, 0] = batch["passage_keys"][0, 0]  # row 2's positive is row 0's
    batch["passage_keys"][3, 1] = batch["passage_keys"][1, 0]  # row 3's negative: row 1's positive
    batch["query_key"][3] = batch["query_key"][1]  # rows 1 and 3: the same query text
    sums = losses.in_batch_negatives_sums(outputs, batch, scale=20.0)
    # Candidates are row * 2 + slot; row 1's positive is candidate 2.
    hidden = [(0, 4), (2, 0), (1, 7), (1, 6), (3, 2)]
    np.testing.assert_allclose(mean_loss(sums), reference_loss(*outputs, 20.0, hidden), rtol=1e-5)
    assert mean_loss(sums) != pytest.approx(reference_loss(*outputs, 20.0), rel=1e-3)


def test_symmetric_and_matryoshka_add_their_terms():
    outputs, batch = retrieval_batch(width=1)
    queries, passages = outputs
    symmetric = losses.in_batch_negatives_sums(outputs, batch, scale=20.0, symmetric=True)
    backward = reference_loss(passages[:, 0], queries[:, None], 20.0)
    np.testing.assert_allclose(
        mean_loss(symmetric), (reference_loss(*outputs, 20.0) + backward) / 2, rtol=1e-5
    )
    nested = losses.in_batch_negatives_sums(outputs, batch, scale=20.0, dims=(16, 4))
    prefix = reference_loss(queries[:, :4], passages[..., :4], 20.0)
    np.testing.assert_allclose(
        mean_loss(nested), reference_loss(*outputs, 20.0) + prefix, rtol=1e-5
    )


def test_over_8_devices_every_shard_sees_every_negative():
    # The global batch of 16 split over 8 devices: the loss is one device's on the whole
    # batch, and not the mean of each shard's loss over its own 2 pairs.
    from bertjax import sharding

    outputs, batch = retrieval_batch(rows=16, width=2)
    mesh = sharding.make_mesh({"data": 8, "fsdp": 1, "tensor": 1})
    split = sharding.batch_sharding(mesh)
    sharded = jax.device_put((outputs, batch), split)
    assert len(sharded[0][0].sharding.device_set) == 8
    step = jax.jit(lambda o, b: losses.in_batch_negatives_sums(o, b, scale=20.0))
    on_mesh = mean_loss(step(*sharded))
    one_device = mean_loss(losses.in_batch_negatives_sums(outputs, batch, scale=20.0))
    np.testing.assert_allclose(on_mesh, one_device, rtol=1e-5)
    per_shard = np.mean(
        [
            reference_loss(outputs[0][s : s + 2], outputs[1][s : s + 2], 20.0)
            for s in range(0, 16, 2)
        ]
    )
    assert abs(on_mesh - per_shard) > 0.5, (on_mesh, per_shard)


# ---------------------------------------------------------------------- reranking


def reranking_batch(labels, weight=None, groups=None) -> dict:
    labels = np.asarray(labels, np.float32)
    return {
        "labels": labels,
        "candidate_weight": np.ones(labels.shape, np.int32) if weight is None else weight,
        "example_weight": np.ones(len(labels), np.float32) if groups is None else groups,
    }


def softplus(x) -> np.ndarray:
    return np.log1p(np.exp(x))


def reranking(logits, batch, loss, **options) -> dict[str, float]:
    step = jax.jit(lambda x, b: losses.reranking_sums(x, b, loss=loss, **options))
    return as_floats(step(jnp.asarray(logits, jnp.float32), batch))


def test_bce_weighs_positives_and_averages_over_the_pairs_there():
    logits = [[2.0, -1.0, 5.0], [0.5, 0.0, 0.0]]
    weight = np.array([[1, 1, 0], [1, 1, 1]], np.int32)  # the first group has two candidates
    batch = reranking_batch([[1, 0, 0], [0, 1, 0]], weight)
    sums = reranking(logits, batch, "bce", pos_weight=3.0)
    expected = (
        3 * softplus(-2.0) + softplus(-1.0) + softplus(0.5) + 3 * softplus(0.0) + softplus(0.0)
    )
    assert sums["loss_sum"] == pytest.approx(expected, rel=1e-6)
    assert sums["weight"] == 5 and sums["groups"] == 2
    assert sums["correct"] == 1  # the second group's top candidate (0.5) is not relevant
    assert losses.summarize_reranking(sums) == pytest.approx(
        {"loss": expected / 5, "accuracy": 0.5}
    )


def test_bce_of_single_pairs_counts_a_logit_of_the_labels_sign_as_correct():
    sums = reranking([[1.5], [-0.5], [2.0]], reranking_batch([[1], [0], [0]]), "bce")
    assert sums["correct"] == 2 and sums["weight"] == 3


def test_listnet_is_the_cross_entropy_to_the_softmax_of_the_labels():
    logits = np.array([[1.0, 0.2, -0.3], [0.0, 2.0, 9.0]])
    labels = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 1.0]])
    weight = np.array([[1, 1, 1], [1, 1, 0]], np.int32)
    sums = reranking(logits, reranking_batch(labels, weight), "listnet")
    expected = 0.0
    for row, there in zip(range(2), (3, 2), strict=True):
        target = np.exp(labels[row, :there]) / np.exp(labels[row, :there]).sum()
        expected -= float(target @ log_softmax(logits[row, :there]))
    assert sums["loss_sum"] == pytest.approx(expected, rel=1e-6)
    assert sums["weight"] == 2 and sums["correct"] == 2


def test_lambdaloss_counts_pairs_of_different_labels_and_ignores_absent_candidates():
    logits = np.array([[0.3, 1.0, -0.5, 0.0]])
    labels = [[1.0, 0.0, 2.0, 0.0]]
    whole = reranking(logits[:, :3], reranking_batch(np.asarray(labels)[:, :3]), "lambdaloss")
    # (2 > 1, 2 > 0, 1 > 0): three ordered pairs; the candidates of equal labels none.
    assert whole["weight"] == 3
    padded = reranking(
        logits, reranking_batch(labels, np.array([[1, 1, 1, 0]], np.int32)), "lambdaloss"
    )
    assert padded == pytest.approx(whole, rel=1e-6)
    # The same group in another order: the same loss.
    order = [2, 0, 1]
    shuffled = reranking(
        logits[:, order], reranking_batch(np.asarray(labels)[:, order]), "lambdaloss"
    )
    assert shuffled["loss_sum"] == pytest.approx(whole["loss_sum"], rel=1e-6)
    tied = reranking([[1.0, 2.0]], reranking_batch([[1.0, 1.0]]), "lambdaloss")
    assert tied["loss_sum"] == 0 and tied["weight"] == 0


@pytest.mark.parametrize("loss", losses.RERANKING_LOSSES)
def test_each_loss_raises_the_positive_and_lowers_the_negatives(loss):
    batch = reranking_batch([[1, 0, 0, 0]])

    def mean(logits):
        sums = losses.reranking_sums(logits, batch, loss=loss)
        return sums["loss_sum"] / sums["weight"]

    grad = np.asarray(jax.grad(mean)(jnp.array([[0.1, 0.4, -0.2, 0.0]])))
    assert grad[0, 0] < 0 and np.all(grad[0, 1:] > 0), grad
    # A group padded by weight 0 is not in the sums.
    padded = reranking_batch([[1, 0, 0, 0], [1, 0, 0, 0]], groups=np.array([1.0, 0.0]))
    both = reranking([[0.1, 0.4, -0.2, 0.0], [9.0, 1.0, 2.0, 3.0]], padded, loss)
    alone = reranking([[0.1, 0.4, -0.2, 0.0]], batch, loss)
    assert both == pytest.approx(alone, rel=1e-6)


@pytest.mark.slow  # torch, sentence-transformers and a MiniLM cross-encoder: about 10 s of CPU
def test_the_reranking_losses_are_sentence_transformers_on_the_same_logits(minilm_dir, test_extras):
    import torch
    from sentence_transformers.cross_encoder import CrossEncoder
    from sentence_transformers.cross_encoder import losses as theirs

    torch.manual_seed(0)  # the new one-logit head
    model = CrossEncoder(str(minilm_dir), num_labels=1)
    queries = ["what is a list", "how to open a file", "what does yield do"]
    docs = [
        ["Lists are mutable sequences.", "A tuple cannot change.", "Open returns a file.", "x"],
        ["Use open(path) to read it.", "Lists sort in place.", "Files are closed on exit."],
        ["yield makes a generator.", "return ends a function.", "A list holds items.", "Hm."],
    ]
    labels = [[1, 0, 0, 0], [2, 0, 1], [1, 0, 0, 0]]
    pairs = [(q, d) for q, group in zip(queries, docs, strict=True) for d in group]
    flat = model.predict(pairs, activation_fn=torch.nn.Identity(), batch_size=len(pairs))
    logits = np.zeros((3, 4), np.float32)
    weight = np.zeros((3, 4), np.int32)
    padded = np.zeros((3, 4), np.float32)
    begin = 0
    for row, group in enumerate(labels):
        logits[row, : len(group)] = flat[begin : begin + len(group)]
        weight[row, : len(group)], padded[row, : len(group)] = 1, group
        begin += len(group)
    batch = reranking_batch(padded, weight)

    def ours(loss, **options):
        sums = reranking(logits, batch, loss, **options)
        return sums["loss_sum"] / sums["weight"]

    binary = [float(label > 0) for group in labels for label in group]
    bce = theirs.BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(3.0))
    with torch.no_grad():
        expected = {
            "bce": bce([[q for q, _ in pairs], [d for _, d in pairs]], torch.tensor(binary)),
            "listnet": theirs.ListNetLoss(model)(
                [queries, docs], [torch.tensor(g, dtype=torch.float32) for g in labels]
            ),
            "lambdaloss": theirs.LambdaLoss(model)(
                [queries, docs], [torch.tensor(g, dtype=torch.float32) for g in labels]
            ),
        }
    batch["labels"] = np.minimum(padded, 1.0)  # BCE's labels: relevant or not
    assert ours("bce", pos_weight=3.0) == pytest.approx(float(expected["bce"]), rel=1e-5)
    batch["labels"] = padded
    for loss in ("listnet", "lambdaloss"):
        assert ours(loss) == pytest.approx(float(expected[loss]), rel=1e-5), loss
