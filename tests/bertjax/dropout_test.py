"""bertjax.dropout: the rate, the scaling and the random bits of 16-bit dropout masks, per platform."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax import dropout


@pytest.mark.parametrize("platform", ["cpu", "tpu"])
@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_elements_drop_at_the_rate_and_the_rest_scale_up(rate, platform, request):
    if platform == "tpu":
        request.getfixturevalue("tpu_mesh_in_context")  # a word per element
    x = jnp.ones((64, 256, 129))  # an odd last axis uses half of its last words
    y = np.asarray(dropout.dropout(x, rate, jax.random.key(0)))
    kept = y != 0
    keep = dropout.keep_threshold(rate) / 2**16
    assert abs(keep - (1 - rate)) <= 2**-17
    # 2.1M draws: the kept share is within 5 standard deviations of keep.
    assert abs(kept.mean() - keep) < 5 * np.sqrt(keep * (1 - keep) / kept.size)
    np.testing.assert_allclose(y[kept], 1 / keep, rtol=1e-6)
    # Unbiased: the mean of the output is that of the input, to sampling error.
    assert abs(y.mean() - 1) < 5 * np.sqrt((1 - keep) / keep / kept.size)


def test_both_halves_of_a_word_decide_independently():
    y = np.asarray(dropout.dropout(jnp.ones((4096, 64)), 0.5, jax.random.key(1))) != 0
    even, odd = y[:, 0::2].ravel(), y[:, 1::2].ravel()  # the two halves of each word
    both = np.mean(even & odd)
    assert abs(both - 0.25) < 5 * np.sqrt(0.25 * 0.75 / even.size)
    # And neighbouring words do not repeat each other.
    assert abs(np.mean(y[:, 0::2][:, :-1] == y[:, 0::2][:, 1:]) - 0.5) < 0.01


def test_a_step_built_for_cpu_splits_words_and_one_for_tpu_does_not(tpu_mesh_in_context):
    x, rng = jnp.ones((64, 130)), jax.random.key(9)
    threshold = dropout.keep_threshold(0.5)
    on_tpu = np.asarray(dropout.dropout(x, 0.5, rng)) != 0
    np.testing.assert_array_equal(on_tpu, dropout.keep_mask(x.shape, threshold, rng, halves=False))
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):
        on_cpu = np.asarray(dropout.dropout(x, 0.5, rng)) != 0
    np.testing.assert_array_equal(on_cpu, dropout.keep_mask(x.shape, threshold, rng, halves=True))
    assert not np.array_equal(on_tpu, on_cpu)


def test_a_word_per_element_decides_with_its_top_half():
    shape, rng = (64, 130), jax.random.key(10)
    words = np.asarray(jax.random.bits(rng, shape, jnp.uint32))
    for threshold in (1, 2**15, dropout.keep_threshold(0.1), 2**16 - 1):
        keep = dropout.keep_mask(shape, threshold, rng, halves=False)
        np.testing.assert_array_equal(keep, (words >> 16) < threshold)


def test_the_same_rng_gives_the_same_mask_and_another_rng_another():
    x = jnp.arange(1.0, 1001.0).reshape(10, 100)
    first = dropout.dropout(x, 0.3, jax.random.key(2))
    np.testing.assert_array_equal(first, dropout.dropout(x, 0.3, jax.random.key(2)))
    assert not np.array_equal(first, dropout.dropout(x, 0.3, jax.random.key(3)))


def test_the_gradient_is_the_mask_times_the_scale():
    x = jnp.full((8, 32), 2.0)
    rng = jax.random.key(4)
    grad = jax.grad(lambda v: jnp.sum(dropout.dropout(v, 0.25, rng)))(x)
    y = dropout.dropout(x, 0.25, rng)
    np.testing.assert_allclose(grad, np.where(np.asarray(y) != 0, 2**16 / 49152, 0.0))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_dtype_is_kept(dtype):
    y = dropout.dropout(jnp.ones((4, 6), dtype), 0.1, jax.random.key(5))
    assert y.dtype == dtype


def test_a_rate_that_rounds_to_zero_changes_nothing():
    x = jnp.arange(6.0)
    assert dropout.dropout(x, 2**-18, jax.random.key(6)) is x
    assert dropout.keep_threshold(0.0) == 2**16


def test_the_module_is_the_identity_when_deterministic():
    module = dropout.Dropout(0.5)
    x = jnp.ones((3, 10))
    np.testing.assert_array_equal(module.apply({}, x, deterministic=True), x)
    dropped = module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(7)})
    assert 0 < np.count_nonzero(dropped) < x.size


def test_bfloat16_values_are_scaled_in_float32():
    # 1 / (58982 / 65536) = 1.11112 rounds to 1.109375 as a bfloat16 factor: 1.3203125
    # would become 1.4609375. Computed in float32 and rounded once: 1.46875.
    x = jnp.full((4, 64), 1.3203125, jnp.bfloat16)
    y = np.asarray(dropout.dropout(x, 0.1, jax.random.key(8)), np.float32)
    np.testing.assert_array_equal(np.unique(y[y != 0]), [1.46875])
