"""BERT in Flax linen: the config, the presets, then the modules from embeddings to heads.

BertForPreTraining's parameters (a BertModel alone is the `bert` subtree):

    bert/embeddings/{word,position,token_type}_embeddings/embedding  [V|P|T, H]
    bert/embeddings/LayerNorm/{scale,bias}                           [H]
    bert/encoder/layer_{i}/attention/{query,key,value}/kernel        [H, A, H/A]
    bert/encoder/layer_{i}/attention/{query,key,value}/bias          [A, H/A]
    bert/encoder/layer_{i}/attention/output/{kernel,bias}            [A, H/A, H], [H]
    bert/encoder/layer_{i}/attention_LayerNorm/{scale,bias}          [H]
    bert/encoder/layer_{i}/intermediate/{kernel,bias}                [H, I], [I]
    bert/encoder/layer_{i}/output/{kernel,bias}                      [I, H], [H]
    bert/encoder/layer_{i}/output_LayerNorm/{scale,bias}             [H]
    bert/pooler/dense/{kernel,bias}                                  [H, H], [H]
    predictions/dense/{kernel,bias}                                  [H, H], [H]
    predictions/LayerNorm/{scale,bias}                               [H]
    predictions/output_bias                                          [V]
    seq_relationship/{kernel,bias}                                   [H, 2], [2]

With `scan_layers` the layers are one subtree `bert/encoder/layer` whose leaves
have a leading axis of length L. The MLM output matrix is the word embedding
table (tied), so it has no parameter of its own.

The names follow the original checkpoint's (google-research/bert) closely, so
importing one is a flat rename table (convert/param_names.py).

Every parameter is boxed with logical axis names (LOGICAL_AXES; scan adds
'layers' in front) and activations are constrained at block boundaries to
('batch', 'length', 'embed'), ('batch', 'length', 'heads', 'kv'),
('batch', 'length', 'mlp') and ('batch', None, 'vocab'). The same names serve
parameters and activations, so a rules table must list 'batch' before any
name that shares its mesh axes (flax assigns each mesh axis once per array, in
rule order). Without rules the constraints are no-ops.

Attention (attention.py) reads `input_mask` as example ids: 0 on padding, k on
the tokens of the k-th example packed into a row, so that no token attends to
padding or to another example. It runs as `attention_implementation` says:
'xla' (any platform; the only one with dropout on the attention
probabilities), 'cudnn' (GPU) or 'splash' (TPU), the last two only with
attention_probs_dropout_prob=0.

Mixed precision: parameters are stored, and the three embeddings summed, in
`param_dtype`; matmuls and activations run in `dtype`; LayerNorm statistics,
the attention softmax and both heads' logits are float32.
"""

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

from bertjax import attention
from bertjax.dropout import Dropout
from data_pipeline.errors import ConfigError

HIDDEN_ACTS = ("gelu_tanh", "gelu", "relu")
NORM_PLACEMENTS = ("post", "pre")
FEED_FORWARDS = ("mlp", "geglu")
POSITION_EMBEDDINGS = ("learned", "rotary")
POOLERS = ("tanh", "norm")
DTYPES = ("float32", "bfloat16")
ATTENTION_IMPLEMENTATIONS = ("xla", "cudnn", "splash")
# jax.checkpoint_policies that are policies themselves (the others build one from arguments).
REMAT_POLICIES = (
    "none",
    "full",
    "everything_saveable",
    "nothing_saveable",
    "dots_saveable",
    "checkpoint_dots",
    "dots_with_no_batch_dims_saveable",
    "checkpoint_dots_with_no_batch_dims",
)

LOGICAL_AXES = {
    "batch": "examples (activations only)",
    "length": "sequence positions (activations only)",
    "embed": "hidden_size H",
    "embed_out": "output side of the square H x H kernels (pooler, MLM transform)",
    "heads": "attention heads A",
    "kv": "size of one attention head, H / A",
    "mlp": "intermediate_size I",
    "vocab": "vocab_size V",
    "position": "max_position_embeddings",
    "token_type": "type_vocab_size",
    "classes": "outputs of a classifier head (2 for NSP)",
    "layers": "stacked layers, only with scan_layers",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BertConfig:
    """The model's hyperparameters.

    The first eleven fields are named as in the original bert_config.json and
    layer_norm_eps as in Hugging Face's config.json (convert/config_json.py reads both);
    the rest are ours.
    """

    vocab_size: int = 30522
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu_tanh"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    # Compute dtype of the matmuls and activations.
    dtype: str = "float32"
    param_dtype: str = "float32"
    # One nn.scan over the layers (fast compiles) instead of a Python loop.
    scan_layers: bool = False
    # 'none', 'full' (recompute everything) or one of REMAT_POLICIES.
    remat_policy: str = "none"
    # 'xla', 'cudnn' (GPU, bfloat16) or 'splash' (TPU); the fused kernels need
    # attention_probs_dropout_prob=0 (attention.py).
    attention_implementation: str = "xla"
    # Pretraining's last layer computes only the positions its heads read (BertEncoder).
    # The outputs are the same either way; the gathers may cost a TPU more than they save.
    trim_last_layer: bool = True

    # The block. The defaults are BERT's; ModernBERT's values (docs/modern-encoders.md)
    # are in experiments/pretrain/modernbert_base.py.
    # 'post': LayerNorm after each residual sum (BERT). 'pre': before each sublayer, plus
    # a final LayerNorm; layer 0's attention then reads the normalized embeddings as they are.
    norm_placement: str = "post"
    # Biases of the dense layers and LayerNorms; the MLM output bias and the classifiers
    # (NSP and fine-tuning heads) keep theirs either way.
    use_bias: bool = True
    # 'mlp': dense, hidden_act, dense. 'geglu': hidden_act(x W) * (x V), then dense.
    feed_forward: str = "mlp"
    # 'learned' position embeddings added to the word embeddings, or 'rotary' ones
    # applied to queries and keys, with base rope_theta in global layers and
    # local_rope_theta in local ones.
    position_embedding: str = "learned"
    rope_theta: float = 10000.0
    local_rope_theta: float = 10000.0
    # Layer i attends to the whole sequence when i % global_attention_every == 0; the
    # others to the keys at most local_attention_window // 2 positions away.
    global_attention_every: int = 1
    local_attention_window: int = 0
    # The pooled output: 'tanh' (BERT: dense, tanh) or 'norm' (dense, hidden_act, LayerNorm).
    pooler: str = "tanh"
    # Output projections (attention and feed-forward outputs, the MLM transform) start at
    # initializer_range / sqrt(2 * num_hidden_layers) instead of initializer_range.
    scale_output_init: bool = False

    def __post_init__(self):
        _check(self)

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "BertConfig":
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "BertConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"unknown BertConfig field(s): {', '.join(unknown)}")
        missing = sorted(f.name for f in _REQUIRED_FIELDS if f.name not in values)
        if missing:
            raise ConfigError(f"missing BertConfig field(s): {', '.join(missing)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Compact sizes from Turc et al. (heads = H / 64); base and large from the BERT paper.
#        (num_hidden_layers, hidden_size, num_attention_heads, intermediate_size)
_SIZES = {
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "medium": (8, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
}
PRESETS = {
    name: dict(num_hidden_layers=n, hidden_size=h, num_attention_heads=a, intermediate_size=i)
    for name, (n, h, a, i) in _SIZES.items()
}

_REQUIRED_FIELDS = [f for f in dataclasses.fields(BertConfig) if f.default is dataclasses.MISSING]


def from_config(model_config: Any) -> BertConfig:
    """Builds the BertConfig for `config.model`: a `preset` name plus overrides of any field."""
    values = model_config.to_dict() if hasattr(model_config, "to_dict") else dict(model_config)
    names = {f.name for f in dataclasses.fields(BertConfig)}
    unknown = sorted(set(values) - names - {"preset"})
    if unknown:
        options = ", ".join("config.model." + k for k in unknown)
        raise ConfigError(f"unknown model option(s): {options}")
    if "preset" not in values:
        raise ConfigError(f"config.model.preset is missing; presets: {', '.join(PRESETS)}")
    preset = values.pop("preset")
    # None leaves a field at the preset's value (experiment configs list every field).
    return BertConfig.from_preset(preset, **{k: v for k, v in values.items() if v is not None})


def _fail(field: str, value: Any, why: str) -> None:
    raise ConfigError(f"BertConfig.{field}={value!r}: {why}")


# The fields that fix parameter shapes: checkpoints of a model must agree on them.
SHAPE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)
# With the block options that decide which parameters exist: what a checkpoint's
# model and the model restoring it must agree on.
PARAMETER_FIELDS = (
    *SHAPE_FIELDS,
    "norm_placement",
    "use_bias",
    "feed_forward",
    "position_embedding",
    "pooler",
)


def _check(c: BertConfig) -> None:
    for field in SHAPE_FIELDS:
        value = getattr(c, field)
        # type_vocab_size=0: no token type embeddings.
        least = 0 if field == "type_vocab_size" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            _fail(field, value, "must be a positive integer" if least else "must be >= 0")
    if c.hidden_size % c.num_attention_heads:
        why = f"must be divisible by num_attention_heads={c.num_attention_heads}"
        _fail("hidden_size", c.hidden_size, why)
    for field in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        value = getattr(c, field)
        if not 0.0 <= value < 1.0:
            _fail(field, value, "must be in [0, 1)")
    for field in ("initializer_range", "layer_norm_eps"):
        if not getattr(c, field) > 0.0:
            _fail(field, getattr(c, field), "must be positive")
    for field in ("scan_layers", "trim_last_layer", "use_bias", "scale_output_init"):
        if not isinstance(getattr(c, field), bool):
            _fail(field, getattr(c, field), "must be a bool")
    for field, values in (
        ("hidden_act", HIDDEN_ACTS),
        ("dtype", DTYPES),
        ("param_dtype", DTYPES),
        ("remat_policy", REMAT_POLICIES),
        ("attention_implementation", ATTENTION_IMPLEMENTATIONS),
        ("norm_placement", NORM_PLACEMENTS),
        ("feed_forward", FEED_FORWARDS),
        ("position_embedding", POSITION_EMBEDDINGS),
        ("pooler", POOLERS),
    ):
        if getattr(c, field) not in values:
            _fail(field, getattr(c, field), f"must be one of {', '.join(values)}")
    if c.position_embedding == "rotary" and (c.hidden_size // c.num_attention_heads) % 2:
        why = f"rotary embeddings need an even head size, not {c.hidden_size // c.num_attention_heads}"
        _fail("position_embedding", c.position_embedding, why)
    for field in ("rope_theta", "local_rope_theta"):
        if not getattr(c, field) > 1.0:
            _fail(field, getattr(c, field), "must be above 1")
    for field, least in (("global_attention_every", 1), ("local_attention_window", 0)):
        value = getattr(c, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            _fail(field, value, f"must be an integer >= {least}")
    if c.global_attention_every > 1 and c.local_attention_window < 2:
        why = (
            f"global_attention_every={c.global_attention_every} makes local layers, which need "
            "a window of at least 2 (keys up to local_attention_window // 2 positions away)"
        )
        _fail("local_attention_window", c.local_attention_window, why)
    if c.attention_implementation == "cudnn" and c.dtype != "bfloat16":
        _fail("attention_implementation", "cudnn", "cuDNN attention needs dtype='bfloat16'")
    if c.attention_implementation != "xla" and c.attention_probs_dropout_prob > 0.0:
        why = (
            f"the kernel cannot drop attention probabilities, but attention_probs_dropout_prob="
            f"{c.attention_probs_dropout_prob}; set attention_probs_dropout_prob=0 to use the kernel"
        )
        _fail("attention_implementation", c.attention_implementation, why)


# The original's tf.truncated_normal_initializer(stddev): N(0, stddev^2) cut at
# +-2 stddev. jax's truncated_normal(stddev) cuts the unit normal at +-2 before
# scaling, the same distribution (its std is about 0.88 * stddev).
def _kernel_init(config: BertConfig, names: tuple[str, ...], output: bool = False):
    stddev = config.initializer_range
    if output and config.scale_output_init:
        stddev /= (2.0 * config.num_hidden_layers) ** 0.5
    return nn.with_logical_partitioning(nn.initializers.truncated_normal(stddev), names)


def _layer_norm(config: BertConfig, name: str | None = None) -> nn.LayerNorm:
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps,
        dtype=jnp.dtype(config.dtype),
        param_dtype=jnp.dtype(config.param_dtype),
        # Two-pass variance, as the original: E[x^2] - E[x]^2 loses digits when |mean| >> std.
        use_fast_variance=False,
        use_bias=config.use_bias,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        name=name,
    )


def _embed(config: BertConfig, rows: int, row_axis: str) -> nn.Embed:
    # Looked up in param_dtype: the three embeddings are summed before LayerNorm casts.
    return nn.Embed(
        rows,
        config.hidden_size,
        dtype=jnp.dtype(config.param_dtype),
        param_dtype=jnp.dtype(config.param_dtype),
        embedding_init=_kernel_init(config, (row_axis, "embed")),
    )


_ACTIVATIONS = {
    "gelu_tanh": functools.partial(nn.gelu, approximate=True),
    "gelu": functools.partial(nn.gelu, approximate=False),
    "relu": nn.relu,
}


def _remat_policy(name: str):
    return None if name == "full" else getattr(jax.checkpoint_policies, name)


class Dense(nn.Module):
    """x . kernel + bias, contracting the trailing axes of x that the kernel does not output.

    The kernel is created in its final shape, so its logical names fit it from
    the start; flax's DenseGeneral initializes a flattened kernel and applies
    the names to that under a mesh (google/flax#3676).
    """

    config: BertConfig
    features: int | tuple[int, ...]
    kernel_axes: tuple[str, ...]
    # Compute dtype when not config.dtype.
    dtype: str | None = None
    # None: config.use_bias.
    use_bias: bool | None = None
    # An output projection (BertConfig.scale_output_init).
    output: bool = False

    @nn.compact
    def __call__(self, x):
        c = self.config
        features = (self.features,) if isinstance(self.features, int) else tuple(self.features)
        n_in = len(self.kernel_axes) - len(features)
        kernel = self.param(
            "kernel",
            _kernel_init(c, self.kernel_axes, self.output),
            (*x.shape[x.ndim - n_in :], *features),
            jnp.dtype(c.param_dtype),
        )
        dtype = jnp.dtype(self.dtype or c.dtype)
        contract = (tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in)))
        y = jax.lax.dot_general(x.astype(dtype), kernel.astype(dtype), (contract, ((), ())))
        if not (c.use_bias if self.use_bias is None else self.use_bias):
            return y
        bias = self.param(
            "bias",
            nn.with_logical_partitioning(nn.initializers.zeros, self.kernel_axes[n_in:]),
            features,
            jnp.dtype(c.param_dtype),
        )
        return y + bias.astype(dtype)


def _output_layer(config: BertConfig, features: int, name: str | None = None) -> Dense:
    """A head's output layer: `features` logits with a bias, in float32 (the matmul is
    negligible)."""
    return Dense(config, features, ("embed", "classes"), dtype="float32", use_bias=True, name=name)


class BertEmbeddings(nn.Module):
    """Word + learned position + token type embeddings -> LayerNorm -> dropout; without
    learned positions (rotary ones) or token types (type_vocab_size=0) where so configured."""

    config: BertConfig

    def setup(self):
        c = self.config
        self.word_embeddings = _embed(c, c.vocab_size, "vocab")
        if c.position_embedding == "learned":
            self.position_embeddings = _embed(c, c.max_position_embeddings, "position")
        if c.type_vocab_size:
            self.token_type_embeddings = _embed(c, c.type_vocab_size, "token_type")
        self.LayerNorm = _layer_norm(c)
        self.dropout = Dropout(c.hidden_dropout_prob)

    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool):
        length = input_ids.shape[1]
        if length > self.config.max_position_embeddings:
            # An out-of-range jnp.take would silently read NaNs.
            raise ValueError(
                f"sequence length {length} exceeds "
                f"max_position_embeddings={self.config.max_position_embeddings}"
            )
        c = self.config
        x = self.word_embeddings(input_ids)
        if c.position_embedding == "learned":
            x = x + self.position_embeddings(position_ids(input_mask))
        if c.type_vocab_size:
            x = x + self.token_type_embeddings(segment_ids)
        x = self.dropout(self.LayerNorm(x), deterministic=deterministic)
        return nn.with_logical_constraint(x, ("batch", "length", "embed"))


def position_ids(input_mask):
    """int [B, L] positions that restart at 0 on the first token of each packed example.

    `input_mask` numbers a row's examples (1, 2, ... on their tokens, 0 on padding;
    data_pipeline/packing.py), so a row of one example gets 0, 1, 2, ... as unpacked,
    padding included.
    """
    index = jnp.arange(input_mask.shape[1])[None]
    first = jnp.concatenate(
        [jnp.ones_like(input_mask[:, :1], bool), input_mask[:, 1:] != input_mask[:, :-1]], axis=1
    )
    start = jax.lax.cummax(jnp.where(first, index, 0), axis=1)
    return jnp.where(input_mask > 0, index - start, index)


def rotary(x, positions, theta):
    """Rotary position embeddings (Su et al. 2021) on x [B, T, A, D] at int [B, T] positions.

    Dimension j < D/2 and j + D/2 rotate as one pair by the angle position * theta^(-2j/D)
    (the halves pairing of GPT-NeoX and Hugging Face's ModernBERT, not interleaved pairs).
    Computed in float32; `theta` may be traced (scanned layers choose it per layer).
    """
    half = x.shape[-1] // 2
    inverse = 1.0 / theta ** (jnp.arange(half, dtype=jnp.float32) * 2.0 / x.shape[-1])
    angles = positions[..., None, None].astype(jnp.float32) * inverse  # [B, T, 1, D/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


class BertSelfAttention(nn.Module):
    """Multi-head self-attention, projected back to hidden_size (no residual)."""

    config: BertConfig

    @nn.compact
    def __call__(self, x, example_ids, positions, local, deterministic: bool, queries=None):
        """x [B, L, H] -> [B, L, H]; with int [B, Q] `queries`, only the queries at those
        positions are computed (keys and values everywhere): [B, Q, H].

        `positions` int [B, L] are the tokens' positions in their examples (rotary
        embeddings); `local` (a bool, traced under scan_layers) makes this layer's
        attention a sliding window.
        """
        c = self.config
        heads = (c.num_attention_heads, c.hidden_size // c.num_attention_heads)

        def project(name, inputs):
            y = Dense(c, heads, ("embed", "heads", "kv"), name=name)(inputs)
            return nn.with_logical_constraint(y, ("batch", "length", "heads", "kv"))

        query_ids = None
        query_positions = positions
        if queries is None:
            query = project("query", x)
        else:
            query = project("query", _gather(x, queries))
            query_ids = jnp.take_along_axis(example_ids, queries, axis=1)
            query_positions = jnp.take_along_axis(positions, queries, axis=1)
        key, value = project("key", x), project("value", x)
        if c.position_embedding == "rotary":
            theta = jnp.where(local, c.local_rope_theta, c.rope_theta)
            query, key = rotary(query, query_positions, theta), rotary(key, positions, theta)
        rate = c.attention_probs_dropout_prob
        dropping = not deterministic and rate > 0.0
        y = attention.attend(
            query,
            key,
            value,
            example_ids,
            query_ids=query_ids,
            query_rows=queries,
            window=c.local_attention_window // 2 if c.global_attention_every > 1 else 0,
            local=local,
            implementation=c.attention_implementation,
            dropout_rate=rate,
            dropout_rng=self.make_rng("dropout") if dropping else None,
            deterministic=deterministic,
        )
        y = nn.with_logical_constraint(y, ("batch", "length", "heads", "kv"))
        return Dense(c, c.hidden_size, ("heads", "kv", "embed"), output=True, name="output")(y)


def _feed_forward(c: BertConfig, x):
    """The position-wise block of a layer, [B, L, H] -> [B, L, H] before its dropout."""
    activate = _ACTIVATIONS[c.hidden_act]
    y = Dense(c, c.intermediate_size, ("embed", "mlp"), name="intermediate")(x)
    if c.feed_forward == "geglu":
        # GLU variants, Shazeer 2020: the activated half gates a linear one.
        y = activate(y) * Dense(c, c.intermediate_size, ("embed", "mlp"), name="gate")(x)
    else:
        y = activate(y)
    y = nn.with_logical_constraint(y, ("batch", "length", "mlp"))
    return Dense(c, c.hidden_size, ("mlp", "embed"), output=True, name="output")(y)


class BertLayer(nn.Module):
    """One transformer block, post-LayerNorm (BERT) or pre-LayerNorm (norm_placement='pre').

    Returns (hidden, None), the body signature nn.scan needs, in both encoder layouts.
    With int [B, Q] `queries` it computes the outputs at those positions only, [B, Q, H]
    (every position still serves as a key and value). `index` is the layer's number: a
    Python int, or traced under scan_layers.
    """

    config: BertConfig

    @nn.compact
    def __call__(self, x, example_ids, positions, index, deterministic: bool, queries=None):
        c = self.config
        local = index % c.global_attention_every != 0
        attend = BertSelfAttention(c, name="attention")
        if c.norm_placement == "post":
            y = attend(x, example_ids, positions, local, deterministic, queries)
            if queries is not None:
                x = _gather(x, queries)
            y = Dropout(c.hidden_dropout_prob)(y, deterministic=deterministic)
            x = _layer_norm(c, "attention_LayerNorm")(x + y)
            y = _feed_forward(c, x)
            y = Dropout(c.hidden_dropout_prob)(y, deterministic=deterministic)
            x = _layer_norm(c, "output_LayerNorm")(x + y)
        else:
            # Layer 0 reads the embeddings' LayerNorm output as it is (ModernBERT). Its
            # pre_attention_LayerNorm exists, unused, so that every layer has the same
            # parameters (one scan body).
            normed = _layer_norm(c, "pre_attention_LayerNorm")(x)
            h = jnp.where(index == 0, x, normed)
            y = attend(h, example_ids, positions, local, deterministic, queries)
            if queries is not None:
                x = _gather(x, queries)
            x = x + Dropout(c.hidden_dropout_prob)(y, deterministic=deterministic)
            y = _feed_forward(c, _layer_norm(c, "pre_mlp_LayerNorm")(x))
            x = x + Dropout(c.hidden_dropout_prob)(y, deterministic=deterministic)
        return nn.with_logical_constraint(x, ("batch", "length", "embed")), None


def _gather(x, positions):
    """x [B, L, ...] at int [B, Q] positions -> [B, Q, ...]."""
    return jnp.take_along_axis(x, positions.reshape(*positions.shape, *[1] * (x.ndim - 2)), axis=1)


def queries_in_last_layer(config: BertConfig) -> bool:
    """Whether BertEncoder computes its last layer at the queried positions alone: where
    trim_last_layer asks, but not with scan_layers (one body for every layer) nor splash
    (whole blocks of 128 queries)."""
    return (
        config.trim_last_layer
        and not config.scan_layers
        and config.attention_implementation != "splash"
    )


class BertEncoder(nn.Module):
    """num_hidden_layers BertLayers: `layer_0`, `layer_1`, ... or one scanned `layer`,
    then `final_LayerNorm` with norm_placement='pre'.

    With int [B, Q] `queries` it returns the final hidden states at those positions
    only, [B, Q, H]. A position's last-layer output depends on the others only as
    keys and values, so where queries_in_last_layer(config), the last layer computes
    its queries, attention output and feed-forward block at those Q positions alone:
    pretraining reads K + max_predictions_per_seq of L positions (K [CLS] tokens, one a
    pair; 21 of 128 unpacked), and skips about 70% of the last layer's FLOPs there
    (5/6 of a layer is not the key and value projections, and (128 - 21) / 128 of that).
    """

    config: BertConfig

    @nn.compact
    def __call__(self, x, input_mask, *, deterministic: bool, queries=None):
        c = self.config
        # input_mask holds example ids (attention.py): 0 padding, k the k-th packed example.
        positions = position_ids(input_mask)
        layer = BertLayer
        if c.remat_policy != "none":
            layer = nn.remat(
                layer,
                policy=_remat_policy(c.remat_policy),
                # Inside scan the loop already stops XLA from merging the recomputation.
                prevent_cse=not c.scan_layers,
                # deterministic (self is argument 0), and the layer's Python index in the loop.
                static_argnums=(5,) if c.scan_layers else (4, 5),
            )
        if c.scan_layers:
            layers = nn.scan(
                layer,
                variable_axes={"params": 0},
                split_rngs={"params": True, "dropout": True},
                in_axes=(nn.broadcast, nn.broadcast, 0, nn.broadcast),
                length=c.num_hidden_layers,
                metadata_params={nn.PARTITION_NAME: "layers"},
            )
            indices = jnp.arange(c.num_hidden_layers)
            x, _ = layers(c, name="layer")(x, input_mask, positions, indices, deterministic)
        else:
            last = c.num_hidden_layers - 1
            for i in range(c.num_hidden_layers):
                at = queries if i == last and queries_in_last_layer(c) else None
                x, _ = layer(c, name=f"layer_{i}")(x, input_mask, positions, i, deterministic, at)
        if queries is not None and not queries_in_last_layer(c):
            x = _gather(x, queries)
        if c.norm_placement == "pre":
            x = _layer_norm(c, "final_LayerNorm")(x)
        return x


class BertPooler(nn.Module):
    """dense(H, tanh) on the [CLS] position: [B, H], or [B, K, H] at `cls_positions` [B, K]
    (the first token of each example packed in a row). With pooler='norm', dense(H),
    hidden_act, LayerNorm instead (ModernBERT's task head, which its token and span
    classifiers apply `every_position`: [B, L, H])."""

    config: BertConfig

    @nn.compact
    def __call__(self, sequence_output, cls_positions=None, every_position=False):
        c = self.config
        if every_position:
            first = sequence_output
        elif cls_positions is None:
            first = sequence_output[:, 0]
        else:
            first = jnp.take_along_axis(sequence_output, cls_positions[..., None], axis=1)
        # ModernBERT's task head starts as an output projection (scale_output_init).
        output = c.pooler == "norm"
        x = Dense(c, c.hidden_size, ("embed", "embed_out"), output=output, name="dense")(first)
        if c.pooler == "norm":
            return _layer_norm(c, "LayerNorm")(_ACTIVATIONS[c.hidden_act](x))
        return jnp.tanh(x)


class BertModel(nn.Module):
    """The encoder that pretraining and fine-tuning share: (sequence_output, pooled_output)."""

    config: BertConfig

    def setup(self):
        self.embeddings = BertEmbeddings(self.config)
        self.encoder = BertEncoder(self.config)
        self.pooler = BertPooler(self.config)

    def __call__(
        self, input_ids, input_mask, segment_ids, cls_positions=None, *, deterministic: bool
    ):
        """int [B, L] inputs -> ([B, L, H], [B, H]) in config.dtype; with int [B, K]
        `cls_positions` of packed rows the pooled output is [B, K, H], one per example."""
        x = self.sequence_output(input_ids, input_mask, segment_ids, deterministic=deterministic)
        return x, self.pooler(x, cls_positions)

    def sequence_output(self, input_ids, input_mask, segment_ids, *, deterministic: bool):
        """The final hidden states [B, L, H] alone, without the pooler (an embedder's)."""
        x = self.embeddings(input_ids, input_mask, segment_ids, deterministic=deterministic)
        return self.encoder(x, input_mask, deterministic=deterministic)

    def hidden_states_at(
        self, input_ids, input_mask, segment_ids, positions, *, deterministic: bool
    ):
        """The final hidden states at int [B, Q] `positions` only: [B, Q, H] (BertEncoder)."""
        x = self.embeddings(input_ids, input_mask, segment_ids, deterministic=deterministic)
        return self.encoder(x, input_mask, deterministic=deterministic, queries=positions)


class BertMLMHead(nn.Module):
    """Masked-LM logits at the masked positions only, against the tied word embeddings."""

    config: BertConfig

    @nn.compact
    def __call__(self, sequence_output, masked_lm_positions, word_embeddings):
        """[B, L, H], int [B, P], [V, H] -> float32 [B, P, V]."""
        c = self.config
        x = jnp.take_along_axis(sequence_output, masked_lm_positions[..., None], axis=1)
        x = Dense(c, c.hidden_size, ("embed", "embed_out"), output=True, name="dense")(x)
        x = _layer_norm(c, "LayerNorm")(_ACTIVATIONS[c.hidden_act](x))
        embeddings = word_embeddings.astype(x.dtype)
        logits = jnp.einsum("bph,vh->bpv", x, embeddings, preferred_element_type=jnp.float32)
        output_bias = self.param(
            "output_bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (c.vocab_size,),
            jnp.dtype(c.param_dtype),
        )
        logits = logits + output_bias.astype(jnp.float32)
        return nn.with_logical_constraint(logits, ("batch", None, "vocab"))


class BertForPreTraining(nn.Module):
    """BertModel with the masked-LM and next-sentence heads; with `next_sentence=False`
    the masked-LM head alone (no pooler, no NSP parameters, None for the NSP logits)."""

    config: BertConfig
    next_sentence: bool = True

    def setup(self):
        c = self.config
        self.bert = BertModel(c)
        self.predictions = BertMLMHead(c)
        if self.next_sentence:
            # Two logits from the pooled [CLS].
            self.seq_relationship = _output_layer(c, 2)

    def __call__(
        self,
        input_ids,
        input_mask,
        segment_ids,
        masked_lm_positions,
        cls_positions=None,
        *,
        deterministic: bool,
    ):
        """Batch features as in data_pipeline/schema.py -> (mlm [B, P, V], nsp [B, 2]) float32;
        of packed rows with `cls_positions` [B, K], nsp [B, K, 2]: one per sequence."""
        # Only the [CLS] and masked positions reach a head: the encoder's last layer
        # computes those alone (BertEncoder), [CLS] first.
        first = (
            jnp.zeros_like(masked_lm_positions[:, :1]) if cls_positions is None else cls_positions
        )
        slots, predictions = first.shape[1], masked_lm_positions.shape[1]
        hidden = self.bert.hidden_states_at(
            input_ids,
            input_mask,
            segment_ids,
            jnp.concatenate([first, masked_lm_positions], axis=1),
            deterministic=deterministic,
        )
        batch = hidden.shape[0]
        word_embeddings = self.bert.embeddings.word_embeddings.embedding
        at_masked = jnp.broadcast_to(jnp.arange(slots, slots + predictions), (batch, predictions))
        mlm_logits = self.predictions(hidden, at_masked, word_embeddings)
        if not self.next_sentence:
            return mlm_logits, None
        pooled_output = self.bert.pooler(
            hidden,
            None if cls_positions is None else jnp.broadcast_to(jnp.arange(slots), (batch, slots)),
        )
        return mlm_logits, self.seq_relationship(pooled_output)


def unstack_layers(bert_params, num_layers: int):
    """A `bert` subtree in the scan layout -> the loop layout (layer_0 ... layer_{n-1})."""
    encoder = bert_params["encoder"]
    if "layer" not in encoder:
        return bert_params
    rest = {k: v for k, v in encoder.items() if k != "layer"}  # final_LayerNorm
    layers = {
        f"layer_{i}": jax.tree.map(lambda x, i=i: x[i], encoder["layer"]) for i in range(num_layers)
    }
    return {**bert_params, "encoder": {**layers, **rest}}


def stack_layers(bert_params, num_layers: int):
    """A `bert` subtree in the loop layout -> the scan layout (one `layer`, leading axis)."""
    encoder = bert_params["encoder"]
    if "layer" in encoder:
        return bert_params
    layers = [encoder[f"layer_{i}"] for i in range(num_layers)]
    rest = {k: v for k, v in encoder.items() if not k.startswith("layer_")}  # final_LayerNorm
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *layers)
    return {**bert_params, "encoder": {"layer": stacked, **rest}}


# ---------------------------------------------------------------- fine-tuning heads
# One output layer on BertModel, as the paper fine-tunes; the heads' names are
# Hugging Face's (`classifier`, `qa_outputs`). The classifiers drop out their
# input at hidden_dropout_prob, as the original run_classifier.py does on the
# pooled output; the span head has no dropout of its own, as in run_squad.py.


def _sequence_output(config: BertConfig, input_ids, input_mask, segment_ids, deterministic):
    """BertModel's sequence output, through its pooler's transform with pooler='norm' (as
    ModernBERT's token and span heads)."""
    bert = BertModel(config, name="bert")
    sequence_output, _ = bert(input_ids, input_mask, segment_ids, deterministic=deterministic)
    if config.pooler == "norm":
        return bert.pooler(sequence_output, every_position=True)
    return sequence_output


class BertForSequenceClassification(nn.Module):
    """`num_labels` logits from the pooled [CLS] output (1 for regression): float32 [B, C],
    or [B, K, C] for the K examples packed in each row at `cls_positions` [B, K]."""

    config: BertConfig
    num_labels: int

    @nn.compact
    def __call__(
        self, input_ids, input_mask, segment_ids, cls_positions=None, *, deterministic: bool
    ):
        c = self.config
        _, pooled_output = BertModel(c, name="bert")(
            input_ids, input_mask, segment_ids, cls_positions, deterministic=deterministic
        )
        x = Dropout(c.hidden_dropout_prob)(pooled_output, deterministic=deterministic)
        return _output_layer(c, self.num_labels, "classifier")(x)


class BertForReranking(nn.Module):
    """A cross-encoder: one score per (query, passage) pair, the logit of
    BertForSequenceClassification with one label (its parameters, named alike). Takes
    each row's `group_size` pairs side by side, int [B, G * L], to float32 [B, G]: a
    group stays on its row's device."""

    config: BertConfig
    group_size: int = 1

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool):
        c = self.config
        rows = input_ids.shape[0]
        ids, mask, segments = (
            x.reshape(rows * self.group_size, -1) for x in (input_ids, input_mask, segment_ids)
        )
        _, pooled_output = BertModel(c, name="bert")(
            ids, mask, segments, deterministic=deterministic
        )
        x = Dropout(c.hidden_dropout_prob)(pooled_output, deterministic=deterministic)
        return _output_layer(c, 1, "classifier")(x).reshape(rows, self.group_size)


class BertForTokenClassification(nn.Module):
    """`num_labels` logits per token from the sequence output (through the pooler's
    transform with pooler='norm', as ModernBERT's); float32 [B, L, K]."""

    config: BertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool):
        c = self.config
        x = _sequence_output(c, input_ids, input_mask, segment_ids, deterministic)
        x = Dropout(c.hidden_dropout_prob)(x, deterministic=deterministic)
        logits = _output_layer(c, self.num_labels, "classifier")(x)
        return nn.with_logical_constraint(logits, ("batch", "length", None))


class BertForQuestionAnswering(nn.Module):
    """Answer-span start and end logits per token (through the pooler's transform with
    pooler='norm', as ModernBERT's); float32 ([B, L], [B, L])."""

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool):
        c = self.config
        x = _sequence_output(c, input_ids, input_mask, segment_ids, deterministic)
        logits = _output_layer(c, 2, "qa_outputs")(x)
        return logits[..., 0], logits[..., 1]
