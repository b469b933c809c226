"""bertjax's block options against Hugging Face's PyTorch ModernBERT (Warner et al. 2024).

Randomly initialised ModernBertForMaskedLM models of several shapes are read into
bertjax's model through the rename table (convert/param_names.py MODERNBERT_TABLE) and
the config reader (convert/config_json.py from_modernbert); hidden states and MLM
logits must agree within 1e-4 on padded rows and on packed rows, at lengths beyond
the local window so that local and global layers differ.
"""

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from bertjax.convert import config_json, param_names
from bertjax.model import BertConfig, BertForPreTraining, BertModel, stack_layers

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4
# Every size distinct, so that a transposed or misassigned block cannot pass.
SHAPES = {
    "three_layers_window_8": dict(
        vocab_size=97,
        hidden_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=72,
        local_attention=8,
        global_attn_every_n_layers=2,
    ),
    "four_layers_window_6": dict(
        vocab_size=83,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=40,
        local_attention=6,
        global_attn_every_n_layers=3,
        global_rope_theta=160000.0,
        local_rope_theta=500.0,
    ),
}


def hf_model(shape: dict, seed: int = 0):
    """A ModernBertForMaskedLM with random weights (eager attention), its config.json values."""
    config = transformers.ModernBertConfig(
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
        attn_implementation="eager",
        **shape,
    )
    torch.manual_seed(seed)
    model = transformers.ModernBertForMaskedLM(config).eval()
    with torch.no_grad():
        # The norms start at ones; random ones make a misplaced norm visible.
        for name, tensor in model.named_parameters():
            if "norm" in name or name == "decoder.bias":
                tensor.copy_(torch.randn_like(tensor) * 0.1 + (0.0 if "bias" in name else 1.0))
    return model, json.loads(config.to_json_string())


def our_params(model, config: BertConfig) -> dict:
    """The Hugging Face model's weights as bertjax parameters, by the rename table."""
    tensors = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    for alias, name in param_names.MODERNBERT_TIED.items():
        np.testing.assert_array_equal(tensors.pop(alias), tensors[name])
    per_layer = dataclasses.replace(config, scan_layers=False)
    init = functools.partial(_init, per_layer)
    shapes = traverse_util.flatten_dict(jax.eval_shape(init, jax.random.key(0)), sep="/")
    table = param_names.modernbert_names(config.num_hidden_layers)
    used = {name for name, _ in table.values()}
    assert set(tensors) == used
    flat = {
        path: param_names.to_ours(tensors[name], layout, "hf", shapes[path].shape)
        for path, (name, layout) in table.items()
    }
    # Layer 0 has no attention norm (model.BertLayer keeps an unused one).
    unused = set(shapes) - set(flat)
    assert unused == {"bert/encoder/layer_0/pre_attention_LayerNorm/scale"}
    flat.update({path: np.ones(shapes[path].shape, np.float32) for path in unused})
    params = traverse_util.unflatten_dict(flat, sep="/")
    if config.scan_layers:
        params["bert"] = stack_layers(params["bert"], config.num_hidden_layers)
    return params


def _init(config, rng):
    ids = jnp.ones((1, 8), jnp.int32)
    model = BertForPreTraining(config, next_sentence=False)
    return nn_unbox(model.init(rng, ids, ids, ids, ids[:, :2], deterministic=True)["params"])


def nn_unbox(tree):
    from flax import linen as nn

    return nn.meta.unbox(tree)


def padded_rows(vocab_size: int, length: int = 30, seed: int = 1):
    """Two rows: one full, one with 11 padding positions at its end."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab_size, (2, length)).astype(np.int32)
    mask = np.ones((2, length), np.int32)
    mask[1, length - 11 :] = 0
    return ids * mask, mask


def ours(config: BertConfig, params, ids, example_ids, positions):
    """(hidden states, MLM logits) at int [B, Q] `positions` from bertjax's model."""
    bert = BertModel(config)
    segments = np.zeros_like(ids)
    hidden = bert.apply(
        {"params": params["bert"]},
        ids,
        example_ids,
        segments,
        positions,
        deterministic=True,
        method=BertModel.hidden_states_at,
    )
    model = BertForPreTraining(config, next_sentence=False)
    first = np.zeros_like(positions[:, :1])
    logits, nsp = model.apply(
        {"params": params}, ids, example_ids, segments, positions, first, deterministic=True
    )
    assert nsp is None
    return np.asarray(hidden), np.asarray(logits)


def theirs(model, ids, mask):
    inputs = dict(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    with torch.no_grad():
        # The encoder's output (after final_norm) and the MLM logits.
        return model.model(**inputs).last_hidden_state.numpy(), model(**inputs).logits.numpy()


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("scan_layers", [False, True])
def test_padded_rows_match_transformers_modernbert(shape, scan_layers):
    model, values = hf_model(SHAPES[shape])
    config = config_json.from_modernbert(values, "config.json", scan_layers=scan_layers)
    params = our_params(model, config)
    ids, mask = padded_rows(config.vocab_size)
    hf_hidden, hf_logits = theirs(model, ids, mask)
    everywhere = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    hidden, logits = ours(config, params, ids, mask, everywhere)
    real = mask.astype(bool)
    np.testing.assert_allclose(hidden[real], hf_hidden[real], atol=TOLERANCE, rtol=TOLERANCE)
    np.testing.assert_allclose(logits[real], hf_logits[real], atol=TOLERANCE, rtol=TOLERANCE)
    # The trimmed last layer (pretraining's: a few queries) gives the same rows.
    some = np.array([[0, 5, 17, 29], [0, 3, 12, 18]])
    hidden, logits = ours(config, params, ids, mask, some)
    at = np.take_along_axis
    np.testing.assert_allclose(hidden, at(hf_hidden, some[..., None], 1), atol=TOLERANCE)
    np.testing.assert_allclose(logits, at(hf_logits, some[..., None], 1), atol=TOLERANCE)


def test_packed_rows_match_each_example_alone():
    model, values = hf_model(SHAPES["three_layers_window_8"])
    config = config_json.from_modernbert(values, "config.json")
    params = our_params(model, config)
    rng = np.random.default_rng(2)
    lengths = [(13, 15), (21, 6)]
    length = 32
    ids = np.zeros((2, length), np.int32)
    example_ids = np.zeros((2, length), np.int32)
    expected_hidden = np.zeros((2, length, config.hidden_size), np.float32)
    expected_logits = np.zeros((2, length, config.vocab_size), np.float32)
    for row, sizes in enumerate(lengths):
        start = 0
        for k, size in enumerate(sizes, start=1):
            example = rng.integers(3, config.vocab_size, (1, size)).astype(np.int32)
            hidden, logits = theirs(model, example, np.ones_like(example))
            ids[row, start : start + size] = example[0]
            example_ids[row, start : start + size] = k
            expected_hidden[row, start : start + size] = hidden[0]
            expected_logits[row, start : start + size] = logits[0]
            start += size
    everywhere = np.broadcast_to(np.arange(length), ids.shape)
    hidden, logits = ours(config, params, ids, example_ids, everywhere)
    real = example_ids > 0
    np.testing.assert_allclose(hidden[real], expected_hidden[real], atol=TOLERANCE)
    np.testing.assert_allclose(logits[real], expected_logits[real], atol=TOLERANCE)


def test_the_local_window_changes_the_outputs():
    """A check that the windows are exercised: all-global attention gives other outputs."""
    model, values = hf_model(SHAPES["three_layers_window_8"])
    config = config_json.from_modernbert(values, "config.json")
    params = our_params(model, config)
    ids, mask = padded_rows(config.vocab_size)
    everywhere = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    windowed, _ = ours(config, params, ids, mask, everywhere)
    all_global = dataclasses.replace(config, global_attention_every=1)
    hidden, _ = ours(all_global, params, ids, mask, everywhere)
    assert np.abs(hidden - windowed)[mask.astype(bool)].max() > 10 * TOLERANCE
