"""The released checkpoints' config files and BertConfig, both ways.

Google's bert_config.json holds BertConfig's first eleven fields under the same
names; Hugging Face's config.json adds layer_norm_eps and keys of its own. The
two disagree on "gelu": the original modeling.py's gelu is the tanh
approximation, Hugging Face's is the exact erf form. A file with "model_type"
is Hugging Face's.
"""

import dataclasses
import json
from typing import Any

import tensorflow as tf

from bertjax.model import BertConfig
from data_pipeline.errors import ConfigError

# The architecture fields both formats name as BertConfig does: its fields up to
# layer_norm_eps (which bert_config.json lacks); the rest of ours are runtime choices.
_NAMES = [f.name for f in dataclasses.fields(BertConfig)]
FIELDS = tuple(_NAMES[: _NAMES.index("layer_norm_eps") + 1])
# Our hidden_act -> Hugging Face's name for the same function.
HF_HIDDEN_ACTS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
# Each format's hidden_act -> ours. Hugging Face has a second name for the tanh form.
_OUR_HIDDEN_ACTS = {
    "google": {"gelu": "gelu_tanh", "relu": "relu"},
    "huggingface": {
        **{theirs: ours for ours, theirs in HF_HIDDEN_ACTS.items()},
        "gelu_pytorch_tanh": "gelu_tanh",
    },
}
# Hugging Face keys that would change the architecture unless they have these values.
_HF_REQUIRED = {
    "model_type": "bert",
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
# Hugging Face keys about its own runtime, tokenizer or fine-tuning: no effect on the weights.
_HF_IGNORED = (
    "_name_or_path",
    "architectures",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "use_cache",
    "classifier_dropout",
    "gradient_checkpointing",
    # A classifier's labels and a sentence-transformers CrossEncoder's activation: the
    # head's tensors hold its shape.
    "id2label",
    "label2id",
    "problem_type",
    "num_labels",
    "sentence_transformers",
    "sbert_ce_default_activation_function",
)


def read(path: str, **overrides) -> BertConfig:
    """The BertConfig of a bert_config.json (Google) or config.json (Hugging Face).

    Keys that change the architecture and are not ours fail; `overrides` sets
    our own fields (dtype, scan_layers, ...).
    """
    with tf.io.gfile.GFile(path) as f:
        values = json.load(f)
    source = "huggingface" if "model_type" in values else "google"
    if source == "huggingface":
        for key, required in _HF_REQUIRED.items():
            if key in values and values.pop(key) != required:
                raise ConfigError(f"{path}: {key} must be {required!r} for BERT")
        for key in _HF_IGNORED:
            values.pop(key, None)
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{path}: unsupported key(s) {', '.join(unknown)}")
    acts = _OUR_HIDDEN_ACTS[source]
    act = values.get("hidden_act")
    if act not in acts:
        raise ConfigError(f"{path}: hidden_act={act!r} is not one of {', '.join(acts)}")
    values["hidden_act"] = acts[act]
    return BertConfig.from_dict({**values, **overrides})


def to_hf(config: BertConfig) -> dict[str, Any]:
    """`config`'s architecture as Hugging Face's BertConfig takes it (config.json's fields)."""
    return {
        **{k: getattr(config, k) for k in FIELDS},
        "hidden_act": HF_HIDDEN_ACTS[config.hidden_act],
    }


# ModernBERT (Warner et al. 2024) in bertjax's block options: model.BertConfig's
# fields that Hugging Face's ModernBertConfig has no key for.
MODERNBERT_BLOCK = dict(
    type_vocab_size=0,
    norm_placement="pre",
    feed_forward="geglu",
    position_embedding="rotary",
    pooler="norm",
    scale_output_init=True,
)
# ModernBertConfig's keys that mean the same as one of ours.
_MODERNBERT_SAME = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_hidden_layers",
    "num_attention_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "initializer_range": "initializer_range",
    "norm_eps": "layer_norm_eps",
    "attention_dropout": "attention_probs_dropout_prob",
    "local_attention": "local_attention_window",
}
# Keys bertjax has one setting for: each group must agree.
_MODERNBERT_ONE_SETTING = {
    "use_bias": ("norm_bias", "attention_bias", "mlp_bias", "classifier_bias"),
    "hidden_dropout_prob": ("embedding_dropout", "mlp_dropout"),
    "hidden_act": ("hidden_activation", "classifier_activation"),
}
# Keys that would change the model unless they have these values.
_MODERNBERT_REQUIRED = {"decoder_bias": True, "tie_word_embeddings": True}
# transformers' ModernBertConfig defaults (ModernBERT-base), for keys a file leaves out;
# the last three are 4.x's keys, which 5.x folded into layer_types and rope_parameters.
_MODERNBERT_DEFAULTS = {
    "vocab_size": 50368,
    "hidden_size": 768,
    "intermediate_size": 1152,
    "num_hidden_layers": 22,
    "num_attention_heads": 12,
    "hidden_activation": "gelu",
    "max_position_embeddings": 8192,
    "initializer_range": 0.02,
    "norm_eps": 1e-5,
    "norm_bias": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "local_attention": 128,
    "embedding_dropout": 0.0,
    "mlp_bias": False,
    "mlp_dropout": 0.0,
    "classifier_bias": False,
    "classifier_activation": "gelu",
    "global_attn_every_n_layers": 3,
    "global_rope_theta": 160000.0,
    "local_rope_theta": 10000.0,
}


_ROPE_4X_KEYS = {"full_attention": "global_rope_theta", "sliding_attention": "local_rope_theta"}
# ModernBertConfig's keys about its runtime, tokenizer, initialization or fine-tuning.
_MODERNBERT_IGNORED = (
    *_HF_IGNORED,
    "model_type",
    "cls_token_id",
    "sep_token_id",
    "initializer_cutoff_factor",
    "deterministic_flash_attn",
    "sparse_prediction",
    "sparse_pred_ignore_index",
    "reference_compile",
    "repad_logits_with_grad",
    "id2label",
    "label2id",
    "problem_type",
    "num_labels",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "chunk_size_feed_forward",
    "tokenizer_class",
)


def from_modernbert(values: dict[str, Any], path: str, **overrides) -> BertConfig:
    """The BertConfig of a Hugging Face ModernBertConfig's config.json `values`
    (transformers 4.48 to 5.x), read from `path`; `overrides` sets our own fields."""
    known = {
        *_MODERNBERT_SAME,
        *(k for keys in _MODERNBERT_ONE_SETTING.values() for k in keys),
        *_MODERNBERT_REQUIRED,
        *_MODERNBERT_DEFAULTS,
        *_MODERNBERT_IGNORED,
        "layer_types",
        "rope_parameters",
        "classifier_pooling",
    }
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{path}: unsupported ModernBERT key(s) {', '.join(unknown)}")
    values = {**_MODERNBERT_DEFAULTS, **values}
    ours = {theirs: values[key] for key, theirs in _MODERNBERT_SAME.items() if key in values}
    for field, keys in _MODERNBERT_ONE_SETTING.items():
        settings = {values[k] for k in keys if k in values}
        if len(settings) > 1:
            given = ", ".join(f"{k}={values[k]!r}" for k in keys if k in values)
            raise ConfigError(f"{path}: bertjax has one setting for {given}")
        if settings:
            ours[field] = settings.pop()
    for key, required in _MODERNBERT_REQUIRED.items():
        if values.get(key, required) != required:
            raise ConfigError(f"{path}: {key} must be {required!r}")
    if values.get("classifier_pooling", "cls") != "cls":
        raise ConfigError(f"{path}: classifier_pooling must be 'cls' (the [CLS] token)")
    act = ours["hidden_act"]
    acts = _OUR_HIDDEN_ACTS["huggingface"]
    if act not in acts:
        raise ConfigError(f"{path}: hidden_activation={act!r} is not one of {', '.join(acts)}")
    ours["hidden_act"] = acts[act]
    ours["global_attention_every"] = _global_every(values, path)
    ours["rope_theta"], ours["local_rope_theta"] = _rope_thetas(values, path)
    return BertConfig.from_dict({**MODERNBERT_BLOCK, **ours, **overrides})


def _global_every(values: dict[str, Any], path: str) -> int:
    """K such that layer i is global iff i % K == 0: layer_types (v5) or
    global_attn_every_n_layers (4.x)."""
    types = values.get("layer_types")
    if types is None:
        return values["global_attn_every_n_layers"]
    every = next((i for i, t in enumerate(types) if i and t == "full_attention"), len(types))
    expected = ["sliding_attention" if i % every else "full_attention" for i in range(len(types))]
    if types != expected:
        raise ConfigError(
            f"{path}: layer_types {types} is not a global layer every K layers from layer 0"
        )
    return every


def _rope_thetas(values: dict[str, Any], path: str) -> tuple[float, float]:
    """(global, local) rotary bases: rope_parameters (v5) or global/local_rope_theta (4.x)."""
    rope = values.get("rope_parameters")
    if rope is None:
        local = values["local_rope_theta"]
        return values["global_rope_theta"], values["global_rope_theta"] if local is None else local
    thetas = []
    for kind in ("full_attention", "sliding_attention"):
        params = rope.get(kind) or {}
        if params.get("rope_type", "default") != "default":
            raise ConfigError(f"{path}: rope_parameters.{kind}: only default rotary embeddings")
        default = _MODERNBERT_DEFAULTS[_ROPE_4X_KEYS[kind]]
        thetas.append(params.get("rope_theta", default))
    return thetas[0], thetas[1]


# BertConfig's block fields at BERT's values; the ModernBERT ones are MODERNBERT_BLOCK's.
_BERT_BLOCK = {
    "norm_placement": "post",
    "use_bias": True,
    "feed_forward": "mlp",
    "position_embedding": "learned",
    "global_attention_every": 1,
    "pooler": "tanh",
}
_MODERNBERT_SHAPE = {
    **{k: v for k, v in MODERNBERT_BLOCK.items() if k != "scale_output_init"},
    "use_bias": False,
}


def hf_family(config: BertConfig) -> str | None:
    """Which Hugging Face architecture holds a model of `config`: 'bert', 'modernbert',
    or None for a mix of the two blocks, which no transformers class computes."""
    if all(getattr(config, k) == v for k, v in _BERT_BLOCK.items()) and config.type_vocab_size:
        return "bert"
    if all(getattr(config, k) == v for k, v in _MODERNBERT_SHAPE.items()):
        return "modernbert"
    return None


def to_modernbert(config: BertConfig) -> dict[str, Any]:
    """`config` as transformers' ModernBertConfig takes it: its config.json's fields, with
    both 5.x's layer_types and rope_parameters and 4.x's keys for the same."""
    every = config.global_attention_every
    layers = range(config.num_hidden_layers)
    act = HF_HIDDEN_ACTS[config.hidden_act]
    return {
        **{theirs: getattr(config, ours) for theirs, ours in _MODERNBERT_SAME.items()},
        "hidden_activation": act,
        "classifier_activation": act,
        **dict.fromkeys(("norm_bias", "attention_bias", "mlp_bias", "classifier_bias"), False),
        "decoder_bias": True,
        "embedding_dropout": config.hidden_dropout_prob,
        "mlp_dropout": config.hidden_dropout_prob,
        "classifier_pooling": "cls",
        "tie_word_embeddings": True,
        "layer_types": ["sliding_attention" if i % every else "full_attention" for i in layers],
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": config.rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rope_theta},
        },
        "global_attn_every_n_layers": every,
        "global_rope_theta": config.rope_theta,
        "local_rope_theta": config.local_rope_theta,
    }
