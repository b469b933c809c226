"""bertjax.attention: the example-id mask rule, splash against xla, and the config's trade."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from bertjax import attention, sharding
from bertjax.model import BertConfig, BertModel
from data_pipeline.errors import ConfigError

# Length 128, splash's smallest; BERT's head size 64.
B, L, A, D = 3, 128, 2, 64


def example_ids(rows: list[list[int]], length: int = L) -> np.ndarray:
    """int [len(rows), length] from each row's example lengths, padded with 0."""
    ids = np.zeros((len(rows), length), np.int32)
    for row, lengths in zip(ids, rows, strict=True):
        start = 0
        for k, n in enumerate(lengths, 1):
            row[start : start + n] = k
            start += n
    return ids


# 0/1 masks: a full row and two padded ones; then packed examples, with and without padding.
PADDED = example_ids([[128], [70], [90]])
PACKED = example_ids([[60, 68], [10, 30, 60], [1, 100]])


def qkv(seed=0, batch=B, length=L, heads=A, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.normal(size=(batch, length, heads, D)), dtype) for _ in range(3))


def attend(query, key, value, ids, implementation="xla", *, rate=0.0, rng=None, **local):
    return attention.attend(
        query,
        key,
        value,
        ids,
        **local,
        implementation=implementation,
        dropout_rate=rate,
        dropout_rng=rng,
        deterministic=rng is None,
    )


def reference(query, key, value, ids, window=None):
    """The rule written out per query in NumPy: real keys of its own example, or of any
    example for a padding query; of a real query, only keys at most `window` rows away."""
    query, key, value = (np.asarray(x, np.float64) for x in (query, key, value))
    out = np.zeros_like(query)
    for b in range(query.shape[0]):
        for t in range(query.shape[1]):
            keys = (ids[b] > 0) & ((ids[b] == ids[b, t]) | (ids[b, t] == 0))
            if window is not None and ids[b, t] > 0:
                keys &= np.abs(np.arange(len(keys)) - t) <= window
            logits = np.einsum("nh,snh->ns", query[b, t], key[b, keys]) / np.sqrt(D)
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            out[b, t] = np.einsum("ns,snh->nh", probs, value[b, keys])
    return out


# --------------------------------------------------------------------------- the mask rule


def test_a_0_1_mask_gives_todays_mask():
    rng = np.random.default_rng(0)
    masks = (rng.random((4, 9)) < 0.7).astype(np.int32)
    masks[0] = 0  # a row of padding only: every key hidden, as before
    today = np.broadcast_to(masks[:, None, :].astype(bool), (4, 9, 9))
    np.testing.assert_array_equal(attention.visible(jnp.asarray(masks)), today)


@pytest.mark.parametrize("ids", [PADDED, PACKED], ids=["padded", "packed"])
def test_xla_attention_is_the_rule(ids):
    query, key, value = qkv()
    got = attend(query, key, value, ids)
    np.testing.assert_allclose(got, reference(query, key, value, ids), atol=2e-5)


@pytest.mark.parametrize("ids", [PADDED, PACKED], ids=["padded", "packed"])
def test_local_xla_attention_is_the_rule_with_a_window(ids):
    query, key, value = qkv()
    got = attend(query, key, value, ids, window=5, local=True)
    want = reference(query, key, value, ids, window=5)
    real = ids > 0
    np.testing.assert_allclose(np.asarray(got)[real], want[real], atol=1e-5)
    # A global layer of the same model ignores the window.
    got = attend(query, key, value, ids, window=5, local=False)
    np.testing.assert_allclose(got, reference(query, key, value, ids), atol=1e-5)


def test_local_attention_at_a_few_queries_uses_their_rows():
    query, key, value = qkv()
    rows = np.array([[0, 3, 64, 127]] * B)
    want = reference(query, key, value, PACKED, window=7)
    got = attention.attend(
        jnp.take_along_axis(query, rows[..., None, None], axis=1),
        key,
        value,
        PACKED,
        query_ids=np.take_along_axis(PACKED, rows, axis=1),
        query_rows=rows,
        window=7,
        local=True,
        implementation="xla",
        dropout_rate=0.0,
        dropout_rng=None,
        deterministic=True,
    )
    np.testing.assert_allclose(got, np.take_along_axis(want, rows[..., None, None], 1), atol=1e-5)


def test_0_1_masks_give_what_the_model_computed_before():
    # Until example ids, the model masked keys only: [B, 1, 1, S] for every query.
    query, key, value = qkv()
    today = PADDED[:, None, None, :].astype(bool)
    want = jax.nn.dot_product_attention(query, key, value, mask=today)
    np.testing.assert_array_equal(attend(query, key, value, PADDED), want)
    rng = jax.random.key(1)
    want = attention.attention_with_probs_dropout(query, key, value, today, rate=0.1, rng=rng)
    np.testing.assert_array_equal(attend(query, key, value, PADDED, rate=0.1, rng=rng), want)


def test_attention_with_probs_dropout_at_rate_zero_is_dot_product_attention():
    query, key, value = qkv()
    mask = attention.visible(jnp.asarray(PACKED))[:, None]
    want = jax.nn.dot_product_attention(query, key, value, mask=mask)
    got = attention.attention_with_probs_dropout(
        query, key, value, mask, rate=0.0, rng=jax.random.key(0)
    )
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize(
    "implementation, rate",
    [("xla", 0.0), ("xla", 0.1), ("splash", 0.0)],
    ids=["xla", "xla_dropout", "splash"],
)
def test_packed_examples_do_not_see_each_other(implementation, rate):
    if implementation == "splash":
        ids = example_ids([[60, 40]])  # whole blocks of 128 for splash
    else:
        ids = np.array([[1, 1, 1, 2, 2, 0, 0]], np.int32)
    query, key, value = qkv(batch=1, length=ids.shape[1])
    first, second = ids[0] == 1, ids[0] == 2
    rng = jax.random.key(0) if rate else None

    def changed_at(where):
        return tuple(jnp.where(where[None, :, None, None], x + 1.0, x) for x in (query, key, value))

    out = attend(query, key, value, ids, implementation, rate=rate, rng=rng)
    other = attend(*changed_at(~first), ids, implementation, rate=rate, rng=rng)
    np.testing.assert_array_equal(out[0, first], other[0, first])
    assert not np.allclose(out[0, second], other[0, second])
    other = attend(*changed_at(~second), ids, implementation, rate=rate, rng=rng)
    np.testing.assert_array_equal(out[0, second], other[0, second])


# --------------------------------------------------------------------------- splash against xla


@pytest.mark.parametrize(
    "rows, length",
    [([[128], [70]], 128), ([[128, 100], [255], [5, 50, 7]], 256)],
    ids=["padded", "packed"],
)
def test_splash_equals_xla_with_gradients(rows, length):
    # Interpret mode on this CPU: the kernel's own code, block by block.
    ids = example_ids(rows, length)
    query, key, value = qkv(batch=len(rows), length=length)
    # Only real queries count: splash gives padding queries padding keys to see.
    real = ids > 0
    weights = jax.random.normal(jax.random.key(0), query.shape) * real[:, :, None, None]

    def outputs_and_grads(implementation):
        def loss(q, k, v):
            out = attend(q, k, v, ids, implementation)
            return (out * weights).sum(), out

        grad = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)
        return jax.jit(grad)(query, key, value)

    (grads, out), (want_grads, want_out) = outputs_and_grads("splash"), outputs_and_grads("xla")
    np.testing.assert_allclose(np.asarray(out)[real], np.asarray(want_out)[real], atol=2e-5)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.slow
def test_local_splash_equals_xla_and_a_traced_flag_picks_the_kernel():
    ids = example_ids([[128, 100], [255], [5, 50, 7]], 256)
    query, key, value = qkv(batch=3, length=256)
    real = ids > 0
    want = reference(query, key, value, ids, window=20)

    def run(local):
        return attend(query, key, value, ids, "splash", window=20, local=local)

    np.testing.assert_allclose(np.asarray(run(True))[real], want[real], atol=2e-5)
    # Under scan_layers the flag is traced: lax.cond chooses the local or the global kernel.
    traced = jax.jit(run)
    np.testing.assert_allclose(np.asarray(traced(jnp.bool_(True)))[real], want[real], atol=2e-5)
    full = reference(query, key, value, ids)
    np.testing.assert_allclose(np.asarray(traced(jnp.bool_(False)))[real], full[real], atol=2e-5)


def test_splash_needs_lengths_in_whole_blocks():
    query, key, value = qkv(length=96)
    with pytest.raises(ConfigError, match="multiple of 128, not 96"):
        attend(query, key, value, np.ones((B, 96), np.int32), "splash")


# --------------------------------------------------------------------------- the model


def model_config(**overrides) -> BertConfig:
    values = dict(
        vocab_size=50,
        hidden_size=2 * D,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=96,
        max_position_embeddings=L,
        attention_probs_dropout_prob=0.0,
    )
    return BertConfig(**{**values, **overrides})


def model_inputs(rows=([128], [70], [40, 60], [10, 10, 107])):
    """(input_ids, input_mask, segment_ids), input_mask the example ids of `rows`."""
    ids = example_ids(list(rows))
    rng = np.random.default_rng(0)
    input_ids = rng.integers(1, 50, ids.shape).astype(np.int32) * (ids > 0)
    return input_ids, ids, np.zeros_like(ids)


def model_outputs(config, variables, inputs, *, grad=False):
    """(sequence_output at real tokens, pooled_output), and their gradient if `grad`."""
    real = inputs[1] > 0

    def forward(params):
        sequence, pooled = BertModel(config).apply(
            {"params": params}, *inputs, deterministic=False, rngs={"dropout": jax.random.key(0)}
        )
        return sequence * real[..., None], pooled

    if not grad:
        return jax.jit(forward)(variables["params"])

    def loss(params):
        sequence, pooled = forward(params)
        return (sequence**2).sum() + pooled.sum()

    return jax.jit(jax.grad(loss))(variables["params"])


# ModernBERT's block: local layers with a window of 16 keys each side, every third global.
MODERN = dict(
    num_hidden_layers=3,
    norm_placement="pre",
    use_bias=False,
    feed_forward="geglu",
    position_embedding="rotary",
    type_vocab_size=0,
    pooler="norm",
    global_attention_every=3,
    local_attention_window=32,
)


@pytest.mark.slow
@pytest.mark.parametrize("block", [{}, MODERN], ids=["bert", "modern"])
def test_a_model_with_splash_equals_xla(block):
    # Trains (deterministic=False) as with the kernel: hidden dropout on, layers scanned.
    xla = model_config(scan_layers=True, hidden_dropout_prob=0.1, **block)
    splash = model_config(
        scan_layers=True, hidden_dropout_prob=0.1, attention_implementation="splash", **block
    )
    inputs = model_inputs(rows=([70], [10, 10, 107]))
    variables = BertModel(xla).init(jax.random.key(0), *inputs, deterministic=True)
    for got, want in zip(
        model_outputs(splash, variables, inputs), model_outputs(xla, variables, inputs), strict=True
    ):
        np.testing.assert_allclose(got, want, atol=3e-5)
    grads = model_outputs(splash, variables, inputs, grad=True)
    want = model_outputs(xla, variables, inputs, grad=True)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4), grads, want)


@pytest.mark.slow
def test_splash_under_a_data_and_tensor_parallel_mesh():
    # 8 fake CPU devices: the batch over data, the heads over tensor, the kernel in
    # shard_map on each device's rows and heads.
    mesh = sharding.make_mesh({"data": 4, "fsdp": 1, "tensor": 2})
    xla, splash = model_config(), model_config(attention_implementation="splash")
    inputs = model_inputs()
    variables = BertModel(xla).init(jax.random.key(0), *inputs, deterministic=True)
    want = model_outputs(xla, variables, inputs)
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
        got = model_outputs(splash, variables, inputs)
        lowered = jax.jit(
            lambda p: BertModel(splash).apply({"params": p}, *inputs, deterministic=True)
        ).lower(variables["params"])
    assert lowered.as_text().count("sdy.manual_computation") == splash.num_hidden_layers
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=3e-5)


@pytest.mark.slow
def test_packed_examples_in_a_model_do_not_see_each_other():
    config = model_config()
    input_ids, ids, segment_ids = model_inputs()
    variables = BertModel(config).init(
        jax.random.key(0), input_ids, ids, segment_ids, deterministic=True
    )
    changed = np.where(ids == 2, 7, input_ids).astype(np.int32)
    (out, _), (other, _) = (
        BertModel(config).apply(variables, i, ids, segment_ids, deterministic=True)
        for i in (input_ids, changed)
    )
    # Padding queries see every real key; their outputs are not compared.
    others = (ids > 0) & (ids != 2)
    np.testing.assert_array_equal(np.asarray(out)[others], np.asarray(other)[others])
    assert not np.allclose(np.asarray(out)[ids == 2], np.asarray(other)[ids == 2])


# --------------------------------------------------------------------------- the trade and platforms


@pytest.mark.parametrize("implementation", ["cudnn", "splash"])
def test_kernels_refuse_attention_dropout(implementation):
    with pytest.raises(
        ConfigError,
        match=rf"BertConfig.attention_implementation='{implementation}': .*"
        r"attention_probs_dropout_prob=0.1; set attention_probs_dropout_prob=0 to use the kernel",
    ):
        model_config(
            attention_implementation=implementation,
            attention_probs_dropout_prob=0.1,
            dtype="bfloat16",
        )
    model_config(attention_implementation=implementation, dtype="bfloat16")


def test_splash_needs_whole_blocks_in_the_model():
    config = model_config(attention_implementation="splash")
    inputs = tuple(x[:, :96] for x in model_inputs())
    with pytest.raises(ConfigError, match="'splash' needs a sequence length that is a multiple"):
        BertModel(config).init(jax.random.key(0), *inputs, deterministic=True)


def test_kernels_only_on_their_platforms(monkeypatch):
    query, key, value = qkv(dtype=jnp.bfloat16)
    # This CPU: xla and (interpreted) splash run, cuDNN does not.
    with pytest.raises(ConfigError, match="'cudnn' runs on gpu, but this step is built for cpu"):
        attend(query, key, value, PADDED, "cudnn")
    monkeypatch.setattr(sharding, "target_platform", lambda: "gpu")
    with pytest.raises(ConfigError, match="'splash' runs on tpu or cpu, but this step is built"):
        attend(query, key, value, PADDED, "splash")
    # On a GPU, cuDNN gets the rule's full mask: its sequence lengths cannot describe packing.
    seen = {}

    def dot_product_attention(query, key, value, **kwargs):
        seen.update(kwargs)
        return query

    monkeypatch.setattr(jax.nn, "dot_product_attention", dot_product_attention)
    attend(query, key, value, PACKED, "cudnn")
    assert seen["implementation"] == "cudnn"
    np.testing.assert_array_equal(seen["mask"], attention.visible(jnp.asarray(PACKED))[:, None])
