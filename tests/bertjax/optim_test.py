"""The optimizer against hand-computed AdamW, the schedule's shape, and the decay mask."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from bertjax import optim


def optimizer_config(**overrides) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict(
        dict(
            name="adamw",
            learning_rate=1e-4,
            warmup_steps=10000,
            b1=0.9,
            b2=0.999,
            eps=1e-6,
            weight_decay=0.01,
            max_grad_norm=1.0,
            num_microbatches=1,
            skip_non_finite_steps=0,
        )
    )
    config.update(overrides)
    return config


def bert_like_params() -> dict:
    """Names as the original checkpoint's, plus the stacked (scanned) encoder layout."""
    hidden, vocab = 4, 7
    kernel = np.ones((hidden, hidden), np.float32)
    vector = np.ones((hidden,), np.float32)
    layer_norm = {"scale": vector, "bias": vector}
    dense = {"kernel": kernel, "bias": vector}
    return {
        "bert": {
            "embeddings": {
                "word_embeddings": {"embedding": np.ones((vocab, hidden), np.float32)},
                "position_embeddings": {"embedding": np.ones((8, hidden), np.float32)},
                "token_type_embeddings": {"embedding": np.ones((2, hidden), np.float32)},
                "LayerNorm": layer_norm,
            },
            "encoder": {
                "layer_0": {
                    "attention": {
                        "self": {"query": dense, "key": dense, "value": dense},
                        "output": {"dense": dense, "LayerNorm": layer_norm},
                    },
                    "intermediate": {"dense": dense},
                    "output": {"dense": dense, "LayerNorm": layer_norm},
                },
                "layers": {
                    "attention": {"query": {"kernel": kernel[None], "bias": vector[None]}},
                    "attention_layer_norm": {"scale": vector[None], "bias": vector[None]},
                    # A norm not named LayerNorm: its `scale` leaf still must not decay.
                    "ffn_norm": {"scale": vector[None], "bias": vector[None]},
                },
            },
            "pooler": {"dense": dense},
        },
        "cls": {
            "predictions": {
                "transform": {"dense": dense, "LayerNorm": layer_norm},
                "output_bias": vector,
            },
            "seq_relationship": {"output_weights": kernel[:2], "output_bias": vector[:2]},
        },
    }


def decayed_paths(mask) -> set[str]:
    leaves = jax.tree_util.tree_flatten_with_path(mask)[0]
    return {
        "/".join(str(key.key) for key in path if isinstance(key, jax.tree_util.DictKey))
        for path, decays in leaves
        if decays
    }


def test_mask_decays_kernels_and_embeddings_only():
    assert decayed_paths(optim.weight_decay_mask(bert_like_params())) == {
        "bert/embeddings/word_embeddings/embedding",
        "bert/embeddings/position_embeddings/embedding",
        "bert/embeddings/token_type_embeddings/embedding",
        "bert/encoder/layer_0/attention/self/query/kernel",
        "bert/encoder/layer_0/attention/self/key/kernel",
        "bert/encoder/layer_0/attention/self/value/kernel",
        "bert/encoder/layer_0/attention/output/dense/kernel",
        "bert/encoder/layer_0/intermediate/dense/kernel",
        "bert/encoder/layer_0/output/dense/kernel",
        "bert/encoder/layers/attention/query/kernel",
        "bert/pooler/dense/kernel",
        "cls/predictions/transform/dense/kernel",
        "cls/seq_relationship/output_weights",
    }


def test_mask_keeps_the_structure_of_boxed_params():
    params = jax.tree.map(
        lambda x: nn.LogicallyPartitioned(x, ("embed",) * x.ndim), bert_like_params()
    )
    mask = optim.weight_decay_mask(params)
    assert jax.tree.structure(mask) == jax.tree.structure(params)
    assert isinstance(mask["bert"]["pooler"]["dense"]["kernel"], nn.LogicallyPartitioned)
    assert nn.meta.unbox(mask) == optim.weight_decay_mask(bert_like_params())


def test_schedule_warms_up_then_decays_to_zero():
    schedule = optim.learning_rate_schedule(
        optimizer_config(learning_rate=1e-4, warmup_steps=100), num_train_steps=1100
    )
    steps = [0, 50, 100, 600, 1100, 1500]
    expected = [0.0, 5e-5, 1e-4, 5e-5, 0.0, 0.0]
    np.testing.assert_allclose([schedule(s) for s in steps], expected, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize(("warmup_steps", "expected"), [(0, [1.0, 0.5, 0.0]), (2, [0.0, 0.5, 0.0])])
def test_schedule_edges(warmup_steps, expected):
    schedule = optim.learning_rate_schedule(
        optimizer_config(learning_rate=1.0, warmup_steps=warmup_steps), num_train_steps=2
    )
    np.testing.assert_allclose([schedule(s) for s in range(3)], expected, atol=1e-7)


def test_warmup_longer_than_training_fails():
    with pytest.raises(
        ValueError, match=r"config\.optimizer\.warmup_steps=11 .*num_train_steps=10"
    ):
        optim.learning_rate_schedule(optimizer_config(warmup_steps=11), num_train_steps=10)


def small_params() -> dict:
    rng = np.random.default_rng(0)
    return {
        "embeddings": {"word_embeddings": {"embedding": rng.normal(size=(5, 3))}},
        "LayerNorm": {"scale": 1.0 + rng.normal(size=(3,)), "bias": rng.normal(size=(3,))},
        "dense": {"kernel": rng.normal(size=(3, 3)), "bias": rng.normal(size=(3,))},
    }


def numpy_adamw(params, grads_per_step, *, lr_at, b1, b2, eps, weight_decay, max_grad_norm):
    """AdamW with bias correction, decay only on kernels and embeddings, global-norm clipping."""
    decays = {"embedding": True, "scale": False, "bias": False, "kernel": True}
    flat = {k: np.array(v, np.float64) for k, v in _flatten(params).items()}
    m = {k: np.zeros_like(v) for k, v in flat.items()}
    v = {k: np.zeros_like(x) for k, x in flat.items()}
    for t, grads in enumerate(grads_per_step):
        grads = {k: np.array(g, np.float64) for k, g in _flatten(grads).items()}
        norm = np.sqrt(sum(np.sum(g**2) for g in grads.values()))
        if max_grad_norm > 0 and norm > max_grad_norm:
            grads = {k: g * max_grad_norm / norm for k, g in grads.items()}
        for k, g in grads.items():
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g**2
            m_hat = m[k] / (1 - b1 ** (t + 1))
            v_hat = v[k] / (1 - b2 ** (t + 1))
            update = m_hat / (np.sqrt(v_hat) + eps)
            if decays[k.rsplit("/", 1)[-1]]:
                update = update + weight_decay * flat[k]
            flat[k] = flat[k] - lr_at(t) * update
    return flat


def _flatten(tree) -> dict:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {"/".join(str(key.key) for key in path): leaf for path, leaf in leaves}


def run_optimizer(tx, params, grads_per_step):
    params = jax.tree.map(jnp.asarray, params)
    state = tx.init(params)
    for grads in grads_per_step:
        updates, state = tx.update(jax.tree.map(jnp.asarray, grads), state, params)
        params = optax.apply_updates(params, updates)
    return params


@pytest.mark.parametrize("max_grad_norm", [1.0, 0.0])
def test_adamw_steps_match_a_hand_computation(max_grad_norm):
    config = optimizer_config(
        learning_rate=0.1, warmup_steps=2, weight_decay=0.3, max_grad_norm=max_grad_norm
    )
    num_train_steps = 10
    params = small_params()
    rng = np.random.default_rng(1)
    # Global norms about 6, 0.3 and 3: clipping changes the relative weight of the steps.
    grads_per_step = [
        jax.tree.map(lambda x, scale=scale: scale * rng.normal(size=np.shape(x)), params)
        for scale in (1.0, 0.05, 0.5)
    ]

    def lr_at(t):
        if t < config.warmup_steps:
            return config.learning_rate * t / config.warmup_steps
        return (
            config.learning_rate * (num_train_steps - t) / (num_train_steps - config.warmup_steps)
        )

    hyper = dict(b1=config.b1, b2=config.b2, eps=config.eps, weight_decay=config.weight_decay)
    expected = numpy_adamw(
        params, grads_per_step, lr_at=lr_at, max_grad_norm=max_grad_norm, **hyper
    )
    got = _flatten(
        run_optimizer(optim.make_optimizer(config, num_train_steps), params, grads_per_step)
    )
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # The comparison is sensitive to clipping: the other setting moves the parameters.
    other = numpy_adamw(
        params, grads_per_step, lr_at=lr_at, max_grad_norm=1.0 - max_grad_norm, **hyper
    )
    assert max(np.max(np.abs(other[k] - expected[k])) for k in expected) > 1e-3


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_zero_gradients_decay_only_masked_leaves(name):
    config = optimizer_config(name=name, learning_rate=0.1, warmup_steps=0, weight_decay=0.5)
    params = small_params()
    zeros = jax.tree.map(np.zeros_like, params)
    got = _flatten(run_optimizer(optim.make_optimizer(config, 10), params, [zeros]))
    for key, before in _flatten(params).items():
        if key.endswith(("kernel", "embedding")):
            assert np.all(np.abs(got[key]) < np.abs(before)), key
        else:
            np.testing.assert_array_equal(got[key], np.asarray(before, np.float32), err_msg=key)


def test_lamb_step_runs_under_jit_and_moves_every_parameter():
    tx = optim.make_optimizer(optimizer_config(name="lamb", learning_rate=0.01, warmup_steps=0), 10)
    params = jax.tree.map(jnp.asarray, small_params())
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    new = optax.apply_updates(params, updates)
    for key, value in _flatten(new).items():
        assert np.all(np.isfinite(value)), key
        assert not np.allclose(value, _flatten(params)[key]), key


def test_unknown_name_is_named():
    with pytest.raises(ValueError, match=r"config\.optimizer\.name='sgd'"):
        optim.make_optimizer(optimizer_config(name="sgd"), 10)


def test_unknown_and_missing_keys_are_named():
    config = optimizer_config()
    config.unlock()
    config.momentum = 0.9
    with pytest.raises(
        ValueError, match=r"unknown optimizer option\(s\): config\.optimizer\.momentum"
    ):
        optim.make_optimizer(config, 10)
    values = optimizer_config().to_dict()
    del values["eps"]
    with pytest.raises(ValueError, match=r"missing optimizer option\(s\): config\.optimizer\.eps"):
        optim.make_optimizer(values, 10)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_microbatches", 0),
        ("learning_rate", 0.0),
        ("warmup_steps", -1),
        ("b2", 1.0),
        ("max_grad_norm", -1.0),
        ("weight_decay", -0.1),
    ],
)
def test_out_of_range_values_are_named(key, value):
    with pytest.raises(ValueError, match=rf"config\.optimizer\.{key}="):
        optim.from_config(optimizer_config(**{key: value}))


# ------------------------------------------------ ModernBERT's schedule and optimizer


def wsd_config(**overrides) -> ml_collections.ConfigDict:
    config = optimizer_config(
        learning_rate=1.0, warmup_steps=2, schedule="warmup_stable_decay", decay_steps=4
    )
    config.update(overrides)
    return config


@pytest.mark.parametrize(
    ("decay_shape", "decay"),
    [
        ("linear", [1.0, 0.75, 0.5, 0.25, 0.0]),
        # 1 - sqrt(s) at s = 0, 1/4, 1/2, 3/4, 1.
        ("1-sqrt", [1.0, 0.5, 1 - np.sqrt(0.5), 1 - np.sqrt(0.75), 0.0]),
        # (1 + cos(pi s)) / 2.
        ("cosine", [1.0, (1 + np.sqrt(0.5)) / 2, 0.5, (1 - np.sqrt(0.5)) / 2, 0.0]),
    ],
)
def test_warmup_stable_decay_holds_the_peak_then_decays_over_the_last_steps(decay_shape, decay):
    # 10 steps: warmup over steps 0-2, the peak until step 6, decay over steps 6-10.
    schedule = optim.learning_rate_schedule(wsd_config(decay_shape=decay_shape), 10)
    expected = [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, *decay, 0.0]
    np.testing.assert_allclose([schedule(s) for s in range(12)], expected, atol=1e-6)


def test_warmup_stable_decay_may_decay_from_the_end_of_warmup_or_the_first_step():
    no_stable = optim.learning_rate_schedule(wsd_config(warmup_steps=2, decay_steps=2), 4)
    np.testing.assert_allclose([no_stable(s) for s in range(5)], [0, 0.5, 1, 0.5, 0], atol=1e-7)
    all_decay = optim.learning_rate_schedule(wsd_config(warmup_steps=0, decay_steps=4), 4)
    np.testing.assert_allclose([all_decay(s) for s in range(5)], [1, 0.75, 0.5, 0.25, 0], atol=1e-7)


def test_warmup_stable_decay_without_decay_steps_holds_the_peak_to_the_end():
    # ModernBERT's phase 1: its decay is phase 3's, another run.
    held = optim.learning_rate_schedule(wsd_config(warmup_steps=2, decay_steps=0), 5)
    np.testing.assert_allclose([held(s) for s in range(7)], [0, 0.5, 1, 1, 1, 1, 1], atol=1e-7)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"decay_steps": 9}, r"decay_steps=9: warmup_steps \+ decay_steps = 11 is above "),
        ({"schedule": "cosine"}, r"schedule='cosine': must be one of linear, warmup_stable"),
        ({"decay_shape": "sqrt"}, r"decay_shape='sqrt': must be one of linear, 1-sqrt, cosine"),
        (
            {"schedule": "linear", "decay_steps": 0, "decay_shape": "1-sqrt"},
            r"decay_shape='1-sqrt': applies to schedule='warmup_stable_decay' only",
        ),
        (
            {"schedule": "linear"},
            r"decay_steps=4: applies to schedule='warmup_stable_decay' only",
        ),
    ],
)
def test_schedule_options_are_checked_by_name(overrides, message):
    with pytest.raises(ValueError, match=rf"^config\.optimizer\.{message}"):
        optim.learning_rate_schedule(wsd_config(**overrides), num_train_steps=10)


def test_options_added_later_may_be_missing_but_others_may_not():
    # An optimizer config written before the schedule options reads as the linear schedule.
    assert optim.from_config(optimizer_config()).schedule == "linear"
    values = wsd_config().to_dict()
    del values["b1"]
    with pytest.raises(ValueError, match=r"missing optimizer option\(s\): config\.optimizer\.b1$"):
        optim.from_config(values)


def numpy_stable_adamw(params, grads_per_step, *, lr_at, b1, b2, eps, weight_decay):
    """Algorithm 1 of Wortsman et al. 2023: AdamW whose rate, decay included, is divided per
    tensor by max(1, RMS(g^2 / max(v_hat, eps^2))); decay on kernels and embeddings only."""
    decays = {"embedding": True, "scale": False, "bias": False, "kernel": True}
    flat = {k: np.array(v, np.float64) for k, v in _flatten(params).items()}
    m = {k: np.zeros_like(v) for k, v in flat.items()}
    v = {k: np.zeros_like(x) for k, x in flat.items()}
    clipped = 0
    for t, grads in enumerate(grads_per_step):
        for k, g in _flatten(grads).items():
            g = np.array(g, np.float64)
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g**2
            m_hat = m[k] / (1 - b1 ** (t + 1))
            v_hat = v[k] / (1 - b2 ** (t + 1))
            rms = np.sqrt(np.mean(g**2 / np.maximum(v_hat, eps**2)))
            clipped += rms > 1
            lr = lr_at(t) / max(1.0, rms)
            if decays[k.rsplit("/", 1)[-1]]:
                flat[k] = flat[k] - lr * weight_decay * flat[k]
            flat[k] = flat[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return flat, clipped


def test_stable_adamw_steps_match_a_hand_computation():
    config = optimizer_config(
        name="stable_adamw", learning_rate=0.1, warmup_steps=0, weight_decay=0.3, max_grad_norm=0.0
    )
    params = small_params()
    rng = np.random.default_rng(2)
    # A gradient 20 times the last one outruns the second moment: those steps are clipped.
    grads_per_step = [
        jax.tree.map(lambda x, scale=scale: scale * rng.normal(size=np.shape(x)), params)
        for scale in (0.05, 1.0, 0.1, 2.0)
    ]

    def lr_at(t):
        return config.learning_rate * (10 - t) / 10

    hyper = dict(b1=config.b1, b2=config.b2, eps=config.eps, weight_decay=config.weight_decay)
    expected, clipped = numpy_stable_adamw(params, grads_per_step, lr_at=lr_at, **hyper)
    assert clipped >= 4  # most tensors on the two jumps: the comparison covers the clipping
    got = _flatten(run_optimizer(optim.make_optimizer(config, 10), params, grads_per_step))
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # Plain AdamW takes larger steps on those jumps.
    adamw = numpy_adamw(params, grads_per_step, lr_at=lr_at, max_grad_norm=0.0, **hyper)
    assert max(np.max(np.abs(adamw[k] - expected[k])) for k in expected) > 1e-3


def test_stable_adamw_runs_under_jit_on_boxed_params():
    tx = optim.make_optimizer(optimizer_config(name="stable_adamw", warmup_steps=0), 10)
    params = jax.tree.map(
        lambda x: nn.LogicallyPartitioned(jnp.asarray(x), ("embed",) * np.ndim(x)), small_params()
    )
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    moved = optax.apply_updates(params, updates)
    for key, value in _flatten(nn.meta.unbox(moved)).items():
        assert np.all(np.isfinite(value)), key
