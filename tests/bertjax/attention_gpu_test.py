"""bertjax.attention's cuDNN path against XLA's, on a GPU (skipped where there is none).

Needs only jax, flax and ml_collections, so it also runs outside the test venv
on a GPU machine: `python -m pytest --noconftest tests/bertjax/attention_gpu_test.py`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax import attention
from bertjax.model import BertConfig, BertForPreTraining, BertModel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN attention needs a GPU"),
]

B, A, D = 4, 4, 64


def example_ids(rows: list[list[int]], length: int) -> np.ndarray:
    """int [len(rows), length] from each row's example lengths, padded with 0."""
    ids = np.zeros((len(rows), length), np.int32)
    for row, lengths in zip(ids, rows, strict=True):
        start = 0
        for k, n in enumerate(lengths, 1):
            row[start : start + n] = k
            start += n
    return ids


CASES = {
    "padded_128": example_ids([[128], [70], [90], [5]], 128),
    "packed_128": example_ids([[60, 68], [10, 30, 60], [1, 100], [128]], 128),
    "packed_512": example_ids([[200, 300], [512], [100, 100, 100], [7, 400]], 512),
}


def attend(query, key, value, ids, implementation, query_ids=None):
    return attention.attend(
        query,
        key,
        value,
        ids,
        query_ids=query_ids,
        implementation=implementation,
        dropout_rate=0.0,
        dropout_rng=None,
        deterministic=True,
    )


@pytest.mark.parametrize("case", list(CASES))
def test_cudnn_outputs_and_gradients_are_xlas(case):
    ids = jnp.asarray(CASES[case])
    length = ids.shape[1]
    rng = np.random.default_rng(0)
    query, key, value = (
        jnp.asarray(rng.normal(size=(B, length, A, D)), jnp.bfloat16) for _ in range(3)
    )
    cotangent = jnp.asarray(rng.normal(size=(B, length, A, D)), jnp.bfloat16)
    real = np.asarray(ids) > 0  # padding queries' outputs are read by nothing

    def loss(implementation):
        def f(q, k, v):
            out = attend(q, k, v, ids, implementation)
            return jnp.sum((out * cotangent).astype(jnp.float32) * real[..., None, None])

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)))

    out = {i: attend(query, key, value, ids, i) for i in ("xla", "cudnn")}
    np.testing.assert_allclose(
        np.asarray(out["cudnn"], np.float32)[real],
        np.asarray(out["xla"], np.float32)[real],
        atol=2e-2,
    )
    (_, want), (_, got) = loss("xla")(query, key, value), loss("cudnn")(query, key, value)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), atol=5e-2)


@pytest.mark.parametrize("queries,keys", [(21, 128), (23, 128), (22, 127)])
def test_cudnn_with_fewer_queries_than_keys(queries, keys):
    # Pretraining's last layer: the [CLS] and masked positions query every key. cuDNN
    # trains with a mask only at even counts; attention.cudnn pads odd ones.
    ids = jnp.asarray(CASES["packed_128"][:, :keys])
    rng = np.random.default_rng(1)
    key, value = (jnp.asarray(rng.normal(size=(B, keys, A, D)), jnp.bfloat16) for _ in range(2))
    positions = jnp.asarray(np.sort(rng.integers(0, 60, (B, queries)), axis=1), jnp.int32)
    query = jnp.asarray(rng.normal(size=(B, queries, A, D)), jnp.bfloat16)
    query_ids = jnp.take_along_axis(ids, positions, axis=1)
    cotangent = jnp.asarray(rng.normal(size=(B, queries, A, D)), jnp.bfloat16)

    def loss(implementation):
        def f(q, k, v):
            out = attend(q, k, v, ids, implementation, query_ids)
            return jnp.sum((out * cotangent).astype(jnp.float32)), out

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2), has_aux=True))

    ((_, got), got_grads), ((_, want), want_grads) = [
        loss(i)(query, key, value) for i in ("cudnn", "xla")
    ]
    assert got.shape == (B, queries, A, D)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=2e-2)
    for g, w in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), atol=5e-2)


@pytest.mark.parametrize("model", [BertModel, BertForPreTraining])
def test_the_model_with_cudnn_is_the_model_with_xla(model):
    config = dict(
        vocab_size=512,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=A,
        intermediate_size=512,
        max_position_embeddings=128,
        attention_probs_dropout_prob=0.0,
        dtype="bfloat16",
    )
    ids = CASES["packed_128"]
    rng = np.random.default_rng(2)
    inputs = [
        jnp.asarray(rng.integers(5, 512, ids.shape), jnp.int32) * (ids > 0),
        jnp.asarray(ids),
        jnp.zeros(ids.shape, jnp.int32),
    ]
    if model is BertForPreTraining:  # 20 masked positions: 21 queries in the last layer
        inputs.append(jnp.asarray(np.sort(rng.integers(1, 60, (B, 20)), axis=1), jnp.int32))
    outputs, grads = {}, {}
    for implementation in ("xla", "cudnn"):
        module = model(BertConfig(**config, attention_implementation=implementation))
        params = module.init(jax.random.key(0), *inputs, deterministic=True)
        outputs[implementation] = module.apply(params, *inputs, deterministic=True)
        if model is BertForPreTraining:  # training: the backward pass through cuDNN too
            grads[implementation] = jax.jit(
                jax.grad(
                    lambda p, m=module: sum(
                        jnp.sum(x) for x in m.apply(p, *inputs, deterministic=True)
                    )
                )
            )(params)
    got_grads, want_grads = (
        [np.asarray(g, np.float32) for g in jax.tree.leaves(grads.get(i, {}))]
        for i in ("cudnn", "xla")
    )
    # The key bias's gradient is 0 but for rounding (a softmax ignores a shift common to
    # all its logits), so a leaf that small is held to the largest leaf's scale.
    floor = 1e-3 * max((np.linalg.norm(w) for w in want_grads), default=0.0)
    for got, want in zip(got_grads, want_grads, strict=True):
        assert np.linalg.norm(got - want) <= 0.1 * max(np.linalg.norm(want), floor)
    real = ids > 0
    for got, want in zip(
        jax.tree.leaves(outputs["cudnn"]), jax.tree.leaves(outputs["xla"]), strict=True
    ):
        got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
        if model is BertModel and got.ndim == 3 and got.shape[1] == ids.shape[1]:
            got, want = got[real], want[real]
        np.testing.assert_allclose(got, want, atol=0.1)
