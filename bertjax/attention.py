"""Attention: which keys each query sees, and the kernels that compute it.

`attend` is the model's one entry point. Its `example_ids` are the model's
`input_mask` input, int [B, L]: 0 on padding and k >= 1 on the tokens of the
k-th example packed into the row, so a row holding one example has the
familiar 0/1 mask. Key s is visible to query t iff

    example_ids[s] > 0 and (example_ids[t] == example_ids[s] or example_ids[t] == 0)

Each example sees only itself, never padding; padding queries, whose outputs
no real token reads, see every real key (as BERT always masked: keys only).
A local layer (sliding-window attention, `window` w > 0 with `local` true)
further limits a real query at row position t to the keys at positions s with
|t - s| <= w; packed examples are contiguous in their row, so this is the
distance within the example.

BertConfig.attention_implementation picks the computation:

    xla     jax.nn.dot_product_attention(implementation='xla') with the
            boolean mask [B, 1, L, L] of the rule above ([B, 1, Q, L] for Q
            queries with their own query_ids and rows); while training with
            attention_probs_dropout_prob > 0, `attention_with_probs_dropout`
            instead, which materialises float32 [B, A, L, L] probabilities.
            Every platform.
    cudnn   jax.nn.dot_product_attention(implementation='cudnn'): GPU only,
            bfloat16, the same boolean mask. jax turns it into an additive bias
            for cuDNN; its query_seq_lengths/key_value_seq_lengths would only
            describe padding at the end of a row, not packed examples.
    splash  TPU splash attention (a Pallas kernel; no [L, L] array in HBM)
            with example_ids as the segment ids of queries and keys, and a
            LocalMask of w keys each side in local layers (its blocks outside
            the window are skipped). Padding is then segment 0 and attends to
            padding only: it differs from the rule above only at padding
            queries, whose outputs are unused. Lengths must be multiples of
            128. On CPU it runs in Pallas interpret mode (slow; it lets the
            tests check it against 'xla'). Under scan_layers, where `local` is
            traced, lax.cond picks the local or the global kernel.

Fused kernels have no dropout on the attention probabilities, so BertConfig
accepts 'cudnn' and 'splash' only with attention_probs_dropout_prob=0: the
paper's 0.1 costs the [B, A, L, L] probabilities in memory and time.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax.experimental.pallas.ops.tpu import splash_attention
from jax.sharding import PartitionSpec

from bertjax import dropout, sharding
from data_pipeline.errors import ConfigError

# Where each implementation runs; splash on CPU in interpret mode.
PLATFORMS = {"xla": ("cpu", "gpu", "tpu"), "cudnn": ("gpu",), "splash": ("tpu", "cpu")}
# Splash tiles both sequence axes in blocks of (a multiple of) 128.
SPLASH_BLOCK = 128
# The logical names of query, key and value, as the model constrains them.
QKV_AXES = ("batch", "length", "heads", "kv")


def attend(
    query,
    key,
    value,
    example_ids,
    *,
    query_ids=None,
    query_rows=None,
    window: int = 0,
    local=False,
    implementation: str,
    dropout_rate: float,
    dropout_rng: jax.Array | None,
    deterministic: bool,
):
    """query/key/value [B, L, A, D], int example_ids [B, L] -> [B, L, A, D].

    With fewer queries than keys, query [B, Q, A, D], `query_ids` int [B, Q] are
    their example ids (key s is visible to query t as above, with query_ids[t]
    for example_ids[t]), `query_rows` int [B, Q] their positions in the row, and
    the result is [B, Q, A, D]; 'splash' needs every query.

    With `window` w > 0 and `local` true (a bool, or a traced scalar) real queries
    see only the keys at most w positions away (module docstring).

    Drops attention probabilities at `dropout_rate` (with `dropout_rng`) unless
    `deterministic`; only 'xla' can.
    """
    example_ids = jnp.asarray(example_ids, jnp.int32)
    dropping = not deterministic and dropout_rate > 0.0
    if dropping and implementation != "xla":
        raise ConfigError(
            f"attention_implementation={implementation!r} cannot drop attention "
            f"probabilities (attention_probs_dropout_prob={dropout_rate}); set "
            "attention_probs_dropout_prob=0 to use the kernel"
        )
    platform = sharding.target_platform()
    if platform not in PLATFORMS[implementation]:
        raise ConfigError(
            f"attention_implementation={implementation!r} runs on "
            f"{' or '.join(PLATFORMS[implementation])}, but this step is built for {platform}; "
            "use attention_implementation='xla'"
        )
    if implementation == "splash":
        if query_ids is not None:
            raise ValueError("splash attention computes every query: query_ids must be None")
        run = functools.partial(splash, query, key, value, example_ids, interpret=platform == "cpu")
        if not window:
            return run(window=None)
        if isinstance(local, bool):
            return run(window=window if local else None)
        return jax.lax.cond(local, lambda: run(window=window), lambda: run(window=None))
    mask = visible(example_ids, query_ids)
    if window:
        mask = mask & within_window(example_ids, window, local, query_ids, query_rows)
    mask = mask[:, None]
    if dropping:
        return attention_with_probs_dropout(
            query, key, value, mask, rate=dropout_rate, rng=dropout_rng
        )
    if implementation == "cudnn":
        return cudnn(query, key, value, mask)
    return jax.nn.dot_product_attention(query, key, value, mask=mask, implementation="xla")


def cudnn(query, key, value, mask):
    """jax.nn.dot_product_attention(implementation='cudnn') at any number of queries and keys.

    jax hands cuDNN the mask as an additive bias, and cuDNN trains with a bias only
    where both counts are even (jax's check_is_flash_attention). Pretraining's last
    layer has 1 or 3 [CLS] queries plus max_predictions_per_seq, odd at 20; a
    fine-tuning length may be odd too. So an odd count gets one more: the last query
    again (its output dropped), or a key that no query sees.
    """
    queries, keys = query.shape[1], key.shape[1]
    if queries % 2:
        query = jnp.concatenate([query, query[:, -1:]], axis=1)
        mask = jnp.concatenate([mask, mask[:, :, -1:]], axis=2)
    if keys % 2:
        key, value = (jnp.pad(x, ((0, 0), (0, 1), (0, 0), (0, 0))) for x in (key, value))
        mask = jnp.pad(mask, ((0, 0), (0, 0), (0, 0), (0, 1)), constant_values=False)
    out = jax.nn.dot_product_attention(query, key, value, mask=mask, implementation="cudnn")
    return out[:, :queries]


def visible(example_ids, query_ids=None):
    """int [B, L] -> bool [B, T, S]: whether query t may attend to key s (module docstring);
    the queries' ids are `query_ids` [B, T] where given, else example_ids."""
    queries = (example_ids if query_ids is None else query_ids)[:, :, None]
    keys = example_ids[:, None, :]
    return (keys > 0) & ((queries == keys) | (queries == 0))


def within_window(example_ids, window: int, local, query_ids=None, query_rows=None):
    """bool [B, T, S]: key s is at most `window` rows from query t, or the layer is not
    `local`, or query t is padding (which keeps seeing every real key)."""
    keys = jnp.arange(example_ids.shape[1])
    rows = keys[None] if query_rows is None else query_rows
    queries = example_ids if query_ids is None else query_ids
    near = jnp.abs(rows[:, :, None] - keys) <= window
    return near | jnp.logical_not(local) | (queries == 0)[:, :, None]


def attention_with_probs_dropout(query, key, value, mask, *, rate: float, rng: jax.Array):
    """Softmax attention with dropout on the probabilities, as the original trains.

    Same layouts as jax.nn.dot_product_attention: query/key/value [B, T|S, A, D],
    boolean mask broadcastable to [B, A, T, S].
    """
    logits = jnp.einsum("btnh,bsnh->bnts", query, key, preferred_element_type=jnp.float32)
    logits = logits / np.sqrt(query.shape[-1]).astype(np.float32)
    # finfo.min rather than -inf: a row with every key masked stays finite (uniform).
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = dropout.dropout(jax.nn.softmax(logits, axis=-1), rate, rng)
    return jnp.einsum("bnts,bsnh->btnh", probs.astype(value.dtype), value)


def splash(query, key, value, example_ids, *, window: int | None, interpret: bool):
    """Splash attention with example_ids as segment ids, and keys at most `window`
    positions away where it is not None; [B, L, A, D] in and out.

    Under a mesh (jax.set_mesh) the kernel runs in shard_map over the mesh axes
    that the logical rules in context give 'batch' and 'heads' (data, fsdp and
    tensor with sharding.RULES): a Pallas call is opaque to XLA's partitioner,
    which would otherwise gather the whole batch onto every device. Rules that
    split 'length' or 'kv' are refused.
    """
    length, head_dim = query.shape[1], query.shape[3]
    if length % SPLASH_BLOCK:
        raise ConfigError(
            f"attention_implementation='splash' needs a sequence length that is a multiple "
            f"of {SPLASH_BLOCK}, not {length}: change max_seq_length or use 'xla'"
        )
    # Splash does not scale the logits by 1/sqrt(D).
    query = query * jnp.asarray(1.0 / np.sqrt(head_dim), query.dtype)
    run = functools.partial(_splash_local, window=window, interpret=interpret)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return run(query, key, value, example_ids)
    batch, split_length, heads, split_kv = nn.logical_to_mesh_axes(QKV_AXES)
    if split_length is not None or split_kv is not None:
        raise ConfigError(
            "attention_implementation='splash' splits only 'batch' and 'heads' over the "
            f"mesh, but the logical axis rules split {QKV_AXES} as "
            f"{(batch, split_length, heads, split_kv)}"
        )
    qkv = PartitionSpec(batch, None, heads, None)
    return jax.shard_map(
        run,
        in_specs=(qkv, qkv, qkv, PartitionSpec(batch, None)),
        out_specs=qkv,
        # Splash's pallas_calls do not declare how their outputs vary over the mesh.
        check_vma=False,
    )(query, key, value, example_ids)


def _splash_local(query, key, value, example_ids, *, window: int | None, interpret: bool):
    """The kernel on one device's rows and heads: vmapped over examples of [A, L, D]."""
    length, heads = query.shape[1], query.shape[2]
    block = next(b for b in (512, 256, SPLASH_BLOCK) if length % b == 0)
    sizes = splash_attention.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    # Within a segment: every key, or those in the window. The segment ids do the rest.
    shape = (length, length)
    if window is None:
        one_head = splash_attention.FullMask(shape)
    else:
        one_head = splash_attention.LocalMask(shape, window_size=(window, window), offset=0)
    mask = splash_attention.MultiHeadMask([one_head] * heads)
    kernel = splash_attention.make_splash_mha(
        mask, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret
    )

    def one_example(q, k, v, ids):
        return kernel(q, k, v, segment_ids=splash_attention.SegmentIds(q=ids, kv=ids))

    def heads_first(x):
        return jnp.swapaxes(x, 1, 2)

    y = jax.vmap(one_example)(heads_first(query), heads_first(key), heads_first(value), example_ids)
    return heads_first(y)
