"""Using a trained workdir from Python: restore it, then ask the model to fill in masks.

restored = bertjax.inference.restore("demo_out")
fill_mask(restored, "The [MASK] statement raises an exception.")
"""

import dataclasses
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from flax import linen as nn

from bertjax import checkpoint
from bertjax.model import BertConfig, BertForPreTraining
from data_pipeline import config as data_config_lib
from data_pipeline.tokenizer import make_tokenizer

MASK_TEXT = "[MASK]"


@dataclasses.dataclass
class Restored:
    """A model with its parameters, config and tokenizer, on the local devices."""

    model: BertForPreTraining
    params: Any
    config: BertConfig
    tokenizer: Any
    step: int


def restore(workdir: str, step: int | None = None) -> Restored:
    """Restores a pretraining workdir (latest or `step`) onto the local default device."""
    model_config = checkpoint.read_model_config(workdir)
    if model_config is None:
        raise checkpoint.CheckpointError(f"{workdir}: no {checkpoint.MODEL_CONFIG_FILE}")
    with open(os.path.join(workdir, checkpoint.CONFIG_FILE), encoding="utf-8") as f:
        run_config = json.load(f)
    data = data_config_lib.from_config(run_config["data"])
    vocab_file = checkpoint.workdir_vocab(workdir)
    if vocab_file is None:
        raise checkpoint.CheckpointError(f"{workdir}: no vocabulary (vocab.txt, .json or .model)")
    tokenizer = make_tokenizer(data, vocab_file)
    step = checkpoint.latest_step(workdir) if step is None else step
    if step is None:
        raise checkpoint.CheckpointError(f"{workdir}: no checkpoint to restore")
    model = BertForPreTraining(model_config)

    def init(rng):
        ids = jnp.zeros((1, 8), jnp.int32)
        variables = model.init(rng, ids, ids, ids, ids[:, :1], deterministic=True)
        return nn.meta.unbox(variables["params"])

    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
        jax.eval_shape(init, jax.random.key(0)),
    )
    params = checkpoint.restore_params(workdir, abstract, step)
    return Restored(model=model, params=params, config=model_config, tokenizer=tokenizer, step=step)


def fill_mask(restored: Restored, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each `[MASK]` in `text`, the `top_k` tokens and their probabilities."""
    vocab = restored.tokenizer.vocab
    pieces = text.split(MASK_TEXT)
    if len(pieces) < 2:
        raise ValueError(f"no {MASK_TEXT} in {text!r}")
    encoded = restored.tokenizer.tokenize(tf.constant(pieces)).to_list()
    ids = [vocab.cls_id]
    positions = []
    for index, piece in enumerate(encoded):
        if index:
            positions.append(len(ids))
            ids.append(vocab.mask_id)
        ids.extend(piece)
    ids.append(vocab.sep_id)
    limit = restored.config.max_position_embeddings
    if len(ids) > limit:
        raise ValueError(f"{len(ids)} tokens: longer than the model's {limit} positions")
    input_ids = jnp.asarray([ids], jnp.int32)
    ones = jnp.ones_like(input_ids)
    mlm_logits, _ = restored.model.apply(
        {"params": restored.params},
        input_ids,
        ones,
        jnp.zeros_like(input_ids),
        jnp.asarray([positions], jnp.int32),
        deterministic=True,
    )
    probs = np.asarray(jax.nn.softmax(mlm_logits[0], axis=-1))
    results = []
    for row in probs:
        best = np.argsort(-row)[:top_k]
        results.append([(vocab.tokens[i], float(row[i])) for i in best])
    return results
