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
from data_pipeline.config import ConfigError

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
