"""bertjax.model: sizes, layouts, precision, masking, and parity with Hugging Face's BERT."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import linen as nn
from flax import traverse_util

from bertjax import model as model_lib
from bertjax.convert import config_json, import_export
from bertjax.model import BertConfig, BertForPreTraining, BertModel

# Small enough for CPU, with every size distinct so a transposed kernel cannot pass.
SMALL = dict(
    vocab_size=61,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=40,
    type_vocab_size=2,
)


def small_config(**overrides) -> BertConfig:
    return BertConfig.from_dict({**SMALL, **overrides})


def make_batch(config: BertConfig, batch=3, length=24, predictions=5, seed=0):
    """Random pretraining features; example i has 4 * i padding positions at the end."""
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(1, config.vocab_size, (batch, length), dtype=np.int32)
    input_mask = np.ones((batch, length), np.int32)
    for i in range(batch):
        input_mask[i, length - 4 * i :] = 0
    input_ids *= input_mask
    segment_ids = (np.arange(length) >= length // 2).astype(np.int32)[None] * input_mask
    shortest = length - 4 * (batch - 1)
    positions = np.sort(rng.integers(0, shortest, (batch, predictions)), axis=1)
    return dict(
        input_ids=input_ids,
        input_mask=input_mask,
        segment_ids=segment_ids,
        masked_lm_positions=positions.astype(np.int32),
    )


def features(module, batch):
    names = ["input_ids", "input_mask", "segment_ids"]
    if isinstance(module, BertForPreTraining):
        names.append("masked_lm_positions")
    return {k: jnp.asarray(batch[k]) for k in names}


def init(module, batch):
    return module.init(jax.random.key(0), **features(module, batch), deterministic=True)


def apply(module, variables, batch, *, deterministic=True, dropout_seed=None):
    rngs = {} if dropout_seed is None else {"dropout": jax.random.key(dropout_seed)}
    return module.apply(
        variables, **features(module, batch), deterministic=deterministic, rngs=rngs
    )


def flat(tree):
    return traverse_util.flatten_dict(
        tree, sep="/", is_leaf=lambda _, x: isinstance(x, nn.LogicallyPartitioned)
    )


def count(tree) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.unbox(tree)))


# --------------------------------------------------------------------------- sizes


def encoder_parameters(L, H, F, V=30522, P=512, T=2):
    """Layers L, hidden H, intermediate F, vocab V, positions P, token types T."""
    embeddings = (V + P + T) * H + 2 * H
    layer = 4 * (H * H + H) + (H * F + F) + (F * H + H) + 2 * 2 * H
    pooler = H * H + H
    return embeddings + L * layer + pooler


def pretraining_head_parameters(H, V):
    # MLM transform dense + LayerNorm + output bias (the decoder is the tied table); NSP dense.
    return (H * H + H) + 2 * H + V + (H * 2 + 2)


@pytest.mark.parametrize(
    "preset, published",
    [
        ("tiny", 4_385_920),
        ("mini", None),
        ("small", 28_763_648),
        ("medium", 41_373_184),
        ("base", 109_482_240),
        ("large", 335_141_888),
    ],
)
def test_parameter_counts(preset, published):
    config = BertConfig.from_preset(preset, scan_layers=True)
    batch = make_batch(config, batch=1, length=8, predictions=2)
    encoder = count(jax.eval_shape(lambda: init(BertModel(config), batch))["params"])
    full = count(jax.eval_shape(lambda: init(BertForPreTraining(config), batch))["params"])
    size = model_lib.PRESETS[preset]
    assert encoder == encoder_parameters(
        size["num_hidden_layers"], size["hidden_size"], size["intermediate_size"]
    )
    if published is not None:
        assert encoder == published
    assert full - encoder == pretraining_head_parameters(size["hidden_size"], 30522)


def test_base_pretraining_heads_count():
    # 768^2 + 768 + 2 * 768 + 30522 + 2 * 768 + 2, pinned so a changed head is noticed.
    assert pretraining_head_parameters(768, 30522) == 624_188


# --------------------------------------------------------------------------- layouts


def to_scan_layout(params, num_layers):
    """The per-layer tree (`layer_0`, ...) as the scanned one (`layer`, leading axis)."""
    encoder = dict(params["bert"]["encoder"])
    layers = [encoder.pop(f"layer_{i}") for i in range(num_layers)]
    encoder["layer"] = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
    return {**params, "bert": {**params["bert"], "encoder": encoder}}


def outputs_and_grads(config, params, batch):
    """(mlm, nsp) logits and the gradient of a loss over both, for one set of params."""

    def loss(p):
        mlm, nsp = apply(BertForPreTraining(config), {"params": p}, batch)
        return jnp.sum(mlm**2) + jnp.sum(nsp**2), (mlm, nsp)

    (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return logits, grads


@pytest.fixture(scope="module")
def loop_reference():
    """Batch, per-layer params, and the Python-loop model's logits and gradients."""
    config = small_config()
    batch = make_batch(config)
    params = nn.unbox(init(BertForPreTraining(config), batch))["params"]
    return batch, params, *outputs_and_grads(config, params, batch)


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        dict(scan_layers=True),
        dict(remat_policy="full"),
        dict(remat_policy="dots_with_no_batch_dims_saveable"),
        dict(scan_layers=True, remat_policy="full"),
    ],
    ids=str,
)
def test_scan_and_remat_match_the_loop(overrides, loop_reference):
    batch, params, want, want_grads = loop_reference
    config = small_config(**overrides)
    if config.scan_layers:
        params = to_scan_layout(params, config.num_hidden_layers)
        want_grads = to_scan_layout(want_grads, config.num_hidden_layers)
        scan_shapes = jax.eval_shape(lambda: nn.unbox(init(BertForPreTraining(config), batch)))
        assert jax.tree.map(np.shape, params) == jax.tree.map(np.shape, scan_shapes["params"])
    got, got_grads = outputs_and_grads(config, params, batch)
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], atol=1e-5)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, atol=1e-4), got_grads, want_grads)


@pytest.mark.parametrize("scan_layers", [False, True])
def test_every_parameter_has_logical_axis_names(scan_layers):
    config = small_config(scan_layers=scan_layers)
    batch = make_batch(config)
    variables = jax.eval_shape(lambda: init(BertForPreTraining(config), batch))
    leaves = flat(variables["params"])
    # Embeddings 5, pooler 2, heads 7, and 16 per layer (one scanned stack or L of them).
    assert len(leaves) == 14 + 16 * (1 if scan_layers else config.num_hidden_layers)
    for path, leaf in leaves.items():
        assert isinstance(leaf, nn.LogicallyPartitioned), path
        assert len(leaf.names) == leaf.value.ndim, path
        assert set(leaf.names) <= set(model_lib.LOGICAL_AXES), path
        if "/encoder/" in path:
            assert (leaf.names[0] == "layers") == scan_layers, path
    specs = flat(nn.get_partition_spec(variables)["params"])
    assert specs["bert/embeddings/word_embeddings/embedding"] == jax.sharding.PartitionSpec(
        "vocab", "embed"
    )


@pytest.mark.slow
def test_constraints_are_valid_under_a_mesh():
    # One device, so nothing is split; a malformed logical spec (wrong rank, unknown
    # or repeated name) would still fail here.
    rules = (
        ("batch", ("data", "fsdp")),
        ("embed", "fsdp"),
        ("heads", "tensor"),
        ("mlp", "tensor"),
        ("vocab", "tensor"),
    )
    # Auto axes: with jax's default Explicit axes, flax's constraints act as assertions.
    mesh = jax.make_mesh(
        (1, 1, 1), ("data", "fsdp", "tensor"), axis_types=(jax.sharding.AxisType.Auto,) * 3
    )
    config = small_config(scan_layers=True)
    module = BertForPreTraining(config)
    batch = make_batch(config)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        variables = jax.jit(lambda: init(module, batch))()
        mlm, _ = jax.jit(lambda v: apply(module, v, batch, deterministic=False, dropout_seed=0))(
            variables
        )
    assert mlm.shape == (3, 5, config.vocab_size)


# --------------------------------------------------------------------------- masking and precision


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("deterministic", [True, False], ids=["no_dropout", "dropout"])
def test_padding_keys_get_no_attention(dtype, deterministic):
    config = small_config(dtype=dtype)
    batch = make_batch(config)
    module = BertModel(config)
    variables = init(module, batch)
    padding = batch["input_mask"] == 0
    changed = dict(batch)
    changed["input_ids"] = np.where(padding, 7, batch["input_ids"]).astype(np.int32)
    changed["segment_ids"] = np.where(padding, 1, batch["segment_ids"]).astype(np.int32)
    outputs = [
        apply(module, variables, b, deterministic=deterministic, dropout_seed=3)
        for b in (batch, changed)
    ]
    (sequence, pooled), (sequence_changed, pooled_changed) = outputs
    assert sequence.dtype == jnp.dtype(dtype)
    real = ~padding
    np.testing.assert_array_equal(
        np.asarray(sequence, np.float32)[real], np.asarray(sequence_changed, np.float32)[real]
    )
    np.testing.assert_array_equal(
        np.asarray(pooled, np.float32), np.asarray(pooled_changed, np.float32)
    )
    assert not np.allclose(
        np.asarray(sequence, np.float32)[padding],
        np.asarray(sequence_changed, np.float32)[padding],
    )


@pytest.mark.slow
def test_bfloat16_compute_is_close_to_float32():
    batch = make_batch(small_config())
    variables = init(BertForPreTraining(small_config()), batch)
    mlm32, nsp32 = apply(BertForPreTraining(small_config()), variables, batch)
    mlm16, nsp16 = apply(BertForPreTraining(small_config(dtype="bfloat16")), variables, batch)
    assert mlm16.dtype == nsp16.dtype == jnp.float32
    assert jax.tree.leaves(variables)[0].dtype == jnp.float32
    # Logits here are ~0.5 in size; bfloat16 keeps ~3 significant digits per op.
    assert np.abs(mlm16 - mlm32).max() < 0.05
    assert np.abs(mlm16 - mlm32).mean() < 0.01
    np.testing.assert_allclose(nsp16, nsp32, atol=0.02)


@pytest.mark.slow
def test_mlm_logits_are_the_full_sequence_logits_at_the_masked_positions():
    config = small_config()
    batch = make_batch(config)
    module = BertForPreTraining(config)
    variables = init(module, batch)
    mlm, nsp = apply(module, variables, batch)
    B, L = batch["input_ids"].shape
    assert mlm.shape == (B, batch["masked_lm_positions"].shape[1], config.vocab_size)
    assert nsp.shape == (B, 2)
    every_position = {**batch, "masked_lm_positions": np.tile(np.arange(L, dtype=np.int32), (B, 1))}
    all_logits, _ = apply(module, variables, every_position)
    gathered = np.take_along_axis(
        np.asarray(all_logits), batch["masked_lm_positions"][..., None], axis=1
    )
    np.testing.assert_allclose(mlm, gathered, atol=1e-5)


def full_encoder_heads(module, input_ids, input_mask, segment_ids, positions, cls_positions):
    """BertForPreTraining's heads on the whole encoder's output (every position computed)."""
    sequence_output, pooled = module.bert(
        input_ids, input_mask, segment_ids, cls_positions, deterministic=True
    )
    embeddings = module.bert.embeddings.word_embeddings.embedding
    return module.predictions(sequence_output, positions, embeddings), module.seq_relationship(
        pooled
    )


@pytest.mark.slow
@pytest.mark.parametrize("packed", [False, True], ids=["one_pair_a_row", "packed"])
def test_the_last_layer_at_the_heads_positions_is_the_whole_encoder_there(packed):
    config = small_config()
    batch = make_batch(config)
    cls_positions = None
    if packed:  # row 2 holds a second sequence from position 10, then padding
        batch["input_mask"][2, 10:16] = 2
        cls_positions = jnp.asarray([[0, 0], [0, 0], [0, 10]], jnp.int32)
    module = BertForPreTraining(config)
    params = nn.unbox(init(module, batch))["params"]
    inputs = [jnp.asarray(batch[k]) for k in ("input_ids", "input_mask", "segment_ids")]
    positions = jnp.asarray(batch["masked_lm_positions"])
    assert model_lib.queries_in_last_layer(config)

    def heads(p, method):
        return module.apply({"params": p}, *inputs, positions, cls_positions, method=method)

    def fast(p):  # the model's own path: last layer at [CLS] and the masked positions only
        return heads(p, lambda m, *a: m(*a, deterministic=True))

    def full(p):
        return heads(p, full_encoder_heads)

    # Each compiled once, for its outputs and for XLA's count of its FLOPs.
    compiled = {f: jax.jit(f).lower(params).compile() for f in (fast, full)}
    for got, want in zip(compiled[fast](params), compiled[full](params), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)

    def compiled_flops(f):
        cost = compiled[f].cost_analysis()
        return (cost[0] if isinstance(cost, list | tuple) else cost)["flops"]

    # 7 (or 8) of 24 positions in the last of 3 layers: well under the whole encoder's FLOPs.
    assert compiled_flops(fast) < 0.85 * compiled_flops(full)

    def loss(outputs):
        return lambda p: sum(jnp.sum(jnp.sin(x)) for x in outputs(p))

    got, want = jax.grad(loss(fast))(params), jax.grad(loss(full))(params)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, atol=1e-5), got, want)

    # trim_last_layer=False computes the whole last layer, as the plain encoder does.
    untrimmed = BertForPreTraining(dataclasses.replace(config, trim_last_layer=False))
    assert not model_lib.queries_in_last_layer(untrimmed.config)

    def whole(p):
        return untrimmed.apply({"params": p}, *inputs, positions, cls_positions, deterministic=True)

    compiled[whole] = jax.jit(whole).lower(params).compile()
    for got, want in zip(compiled[whole](params), compiled[full](params), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    # (XLA counts a few elementwise ops apart, hence not exactly equal.)
    assert compiled_flops(whole) == pytest.approx(compiled_flops(full), rel=0.03)


def test_sequence_longer_than_the_position_table_fails():
    config = small_config(max_position_embeddings=16)
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        init(BertModel(config), make_batch(config, length=24))


# --------------------------------------------------------------------------- dropout and init


@pytest.mark.slow
def test_dropout_only_when_not_deterministic():
    config = small_config()
    batch = make_batch(config)
    module = BertForPreTraining(config)
    variables = init(module, batch)
    plain = apply(module, variables, batch)[0]
    np.testing.assert_array_equal(apply(module, variables, batch, dropout_seed=1)[0], plain)
    first = apply(module, variables, batch, deterministic=False, dropout_seed=1)[0]
    again = apply(module, variables, batch, deterministic=False, dropout_seed=1)[0]
    other = apply(module, variables, batch, deterministic=False, dropout_seed=2)[0]
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)
    assert not np.allclose(first, plain)


@pytest.mark.slow  # initializes a full-vocabulary model: 8 to 12 s of CPU
def test_initialization_matches_the_original():
    config = small_config(vocab_size=30522)
    params = flat(nn.unbox(init(BertForPreTraining(config), make_batch(config))["params"]))
    table = np.asarray(params["bert/embeddings/word_embeddings/embedding"])
    # tf.truncated_normal_initializer(0.02): N(0, 0.02^2) cut at +-0.04, std 0.02 * 0.8796.
    assert np.abs(table).max() <= 0.04
    assert table.std() == pytest.approx(0.02 * 0.8796, rel=0.01)
    kernel = np.asarray(params["bert/encoder/layer_0/attention/query/kernel"])
    assert np.abs(kernel).max() <= 0.04 and kernel.std() == pytest.approx(0.0176, rel=0.05)
    for path, value in params.items():
        if path.endswith("bias"):
            assert not np.any(value), path
        if path.endswith("scale"):
            assert np.all(value == 1), path


# --------------------------------------------------------------------------- Hugging Face parity


@pytest.mark.slow  # imports PyTorch and transformers: 13 s of CPU for the first
@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_matches_huggingface_bert_for_pretraining(hidden_act, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**SMALL, hidden_act=hidden_act, attn_implementation="eager")
    hf_model = transformers.BertForPreTraining(hf_config).eval()
    with torch.no_grad():  # Zero biases and unit scales would hide mistakes in mapping them.
        for p in hf_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    state = hf_model.state_dict()
    assert torch.equal(
        state["cls.predictions.decoder.weight"], state["bert.embeddings.word_embeddings.weight"]
    )

    hf_config.save_pretrained(tmp_path)
    config = config_json.read(str(tmp_path / "config.json"))
    assert config.hidden_act == {"gelu": "gelu", "gelu_new": "gelu_tanh"}[hidden_act]
    module = BertForPreTraining(config)
    batch = make_batch(config)
    params, initialized = import_export.params_from_tensors(
        {k: v.detach().numpy() for k, v in state.items()}, config, "hf"
    )
    assert initialized == []
    expected = jax.eval_shape(lambda: nn.unbox(init(module, batch)))["params"]
    assert jax.tree.map(np.shape, params) == jax.tree.map(np.shape, expected)
    mlm, nsp = apply(module, {"params": params}, batch)

    with torch.no_grad():
        out = hf_model(
            input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
        )
    want_mlm = np.take_along_axis(
        out.prediction_logits.numpy(), batch["masked_lm_positions"][..., None], axis=1
    )
    np.testing.assert_allclose(mlm, want_mlm, atol=1e-4)
    np.testing.assert_allclose(nsp, out.seq_relationship_logits.numpy(), atol=1e-4)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "field, value",
    [
        ("hidden_size", 30),
        ("num_attention_heads", 0),
        ("vocab_size", 2.5),
        ("hidden_act", "gelu_new"),
        ("hidden_dropout_prob", 1.0),
        ("attention_probs_dropout_prob", -0.1),
        ("layer_norm_eps", 0.0),
        ("dtype", "float16"),
        ("param_dtype", "int8"),
        ("remat_policy", "save_only_these_names"),
        ("attention_implementation", "flash"),
        ("attention_implementation", "cudnn"),  # needs bfloat16
        ("scan_layers", "yes"),
        ("norm_placement", "sandwich"),
        ("use_bias", 1),
        ("feed_forward", "swiglu"),
        ("position_embedding", "alibi"),
        ("rope_theta", 1.0),
        ("global_attention_every", 0),
        ("local_attention_window", -2),
        ("pooler", "mean"),
        ("scale_output_init", "yes"),
        ("type_vocab_size", -1),
    ],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"BertConfig.{field}="):
        small_config(**{field: value})


def test_remat_policies_are_jax_policies():
    for name in model_lib.REMAT_POLICIES[2:]:
        assert callable(getattr(jax.checkpoint_policies, name)), name


def test_config_errors_for_unknown_and_missing_fields():
    with pytest.raises(ValueError, match="unknown BertConfig field.*hiden_size"):
        small_config(hiden_size=32)
    with pytest.raises(ValueError, match="missing BertConfig field.*intermediate_size"):
        BertConfig.from_dict({k: v for k, v in SMALL.items() if k != "intermediate_size"})
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        BertConfig.from_preset("huge")


def test_config_dict_round_trips_through_json():
    config = BertConfig.from_preset(
        "mini", dtype="bfloat16", scan_layers=True, remat_policy="dots_saveable"
    )
    assert BertConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert BertConfig.from_preset("base") == BertConfig.from_dict(
        {**model_lib.PRESETS["base"], "hidden_act": "gelu_tanh"}
    )


def test_from_config():
    model = ml_collections.ConfigDict(
        dict(preset="tiny", vocab_size=4096, dtype="bfloat16", scan_layers=True)
    )
    config = model_lib.from_config(model)
    assert config == BertConfig.from_preset(
        "tiny", vocab_size=4096, dtype="bfloat16", scan_layers=True
    )
    assert (config.num_hidden_layers, config.hidden_size, config.hidden_act) == (
        2,
        128,
        "gelu_tanh",
    )
    model.hidden_dropout = 0.2
    with pytest.raises(ValueError, match=r"config\.model\.hidden_dropout\b"):
        model_lib.from_config(model)
    with pytest.raises(ValueError, match=r"config\.model\.preset is missing"):
        model_lib.from_config({"hidden_size": 128})


# --------------------------------------------------------------------------- modern blocks

# ModernBERT's block (docs/modern-encoders.md) at SMALL's sizes: layers 0 and 2 global
# (every second), layer 1 local with keys up to 3 positions away.
MODERN = dict(
    norm_placement="pre",
    use_bias=False,
    feed_forward="geglu",
    position_embedding="rotary",
    local_rope_theta=500.0,
    type_vocab_size=0,
    pooler="norm",
    global_attention_every=2,
    local_attention_window=6,
    scale_output_init=True,
)


def test_the_modern_block_has_modernberts_parameters():
    config = small_config(**MODERN)
    batch = make_batch(config)
    model = BertForPreTraining(config, next_sentence=False)
    params = flat(jax.eval_shape(lambda: init(model, batch))["params"])
    layer = sorted(p.removeprefix("bert/encoder/layer_1/") for p in params if "layer_1/" in p)
    assert layer == [
        "attention/key/kernel",
        "attention/output/kernel",
        "attention/query/kernel",
        "attention/value/kernel",
        "gate/kernel",
        "intermediate/kernel",
        "output/kernel",
        "pre_attention_LayerNorm/scale",
        "pre_mlp_LayerNorm/scale",
    ]
    rest = sorted(p for p in params if "/layer_" not in p)
    assert rest == [
        "bert/embeddings/LayerNorm/scale",
        "bert/embeddings/word_embeddings/embedding",
        "bert/encoder/final_LayerNorm/scale",
        "predictions/LayerNorm/scale",
        "predictions/dense/kernel",
        "predictions/output_bias",
    ]
    H, F, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_layer = 4 * H * H + 3 * H * F + 2 * H
    head = H * H + H + config.vocab_size
    expected = config.vocab_size * H + H + L * per_layer + H + head
    assert sum(int(np.prod(p.value.shape)) for p in params.values()) == expected
    # The classification pooler: dense, activation, LayerNorm.
    pooled = flat(jax.eval_shape(lambda: init(BertModel(config), batch))["params"])
    assert sorted(p for p in pooled if "pooler" in p) == [
        "pooler/LayerNorm/scale",
        "pooler/dense/kernel",
    ]


def test_rotary_embeddings_make_scores_depend_on_distance_only():
    rng = np.random.default_rng(0)
    q, k = (jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32) for _ in range(2))

    def score(m, n):
        at = lambda x, p: model_lib.rotary(x, jnp.array([[p]]), 10000.0)  # noqa: E731
        return float(jnp.sum(at(q, m) * at(k, n)))

    assert score(3, 1) == pytest.approx(score(12, 10), abs=1e-5)
    assert score(40, 7) == pytest.approx(score(33, 0), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(4, 1), abs=1e-3)
    np.testing.assert_allclose(model_lib.rotary(q, jnp.array([[0]]), 10000.0), q)
    # Dimensions j and j + D/2 turn as a pair: at angle pi/2, (x1, x2) -> (-x2, x1).
    x = jnp.asarray([[[[1.0, 2.0]]]])
    theta_half_pi = model_lib.rotary(x, jnp.array([[1]]), 10000.0)
    np.testing.assert_allclose(
        theta_half_pi, [[[[np.cos(1) - 2 * np.sin(1), 2 * np.cos(1) + np.sin(1)]]]], rtol=1e-6
    )


def test_output_projections_start_smaller_with_scale_output_init():
    config = small_config(**MODERN, initializer_range=0.5)
    params = flat(nn.unbox(init(BertModel(config), make_batch(config))["params"]))
    std = {p: float(np.std(np.asarray(v))) for p, v in params.items() if p.endswith("kernel")}
    # The truncated normal's std is about 0.88 of initializer_range (cut at 2 std).
    assert std["encoder/layer_1/attention/query/kernel"] == pytest.approx(0.44, rel=0.2)
    scaled = 0.44 / np.sqrt(2 * config.num_hidden_layers)
    assert std["encoder/layer_1/attention/output/kernel"] == pytest.approx(scaled, rel=0.2)
    assert std["encoder/layer_1/output/kernel"] == pytest.approx(scaled, rel=0.2)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(local_attention_window=0), "makes local layers, which need a window of at least 2"),
        (dict(hidden_size=48, num_attention_heads=16), "rotary embeddings need an even head size"),
    ],
)
def test_modern_options_that_do_not_fit_together(overrides, message):
    with pytest.raises(ValueError, match=message):
        small_config(**{**MODERN, **overrides})


@pytest.mark.slow
def test_a_scanned_rematerialized_modern_model_matches_the_loop():
    # Scanned, the layer index is traced: the local/global choice, the rotary base and
    # layer 0's skipped norm are taken with jnp.where instead of Python.
    config = small_config(**MODERN)
    batch = make_batch(config)
    params = nn.unbox(init(BertForPreTraining(config), batch))["params"]
    want, want_grads = outputs_and_grads(config, params, batch)
    for overrides in (dict(remat_policy="full"), dict(scan_layers=True, remat_policy="full")):
        other = dataclasses.replace(config, **overrides)
        layout = to_scan_layout if other.scan_layers else (lambda tree, _: tree)
        got, got_grads = outputs_and_grads(other, layout(params, 3), batch)
        np.testing.assert_allclose(got[0], want[0], atol=1e-5)
        np.testing.assert_allclose(got[1], want[1], atol=1e-5)
        jax.tree.map(
            lambda g, w: np.testing.assert_allclose(g, w, atol=1e-4),
            got_grads,
            layout(want_grads, 3),
        )
