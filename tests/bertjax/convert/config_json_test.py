"""bertjax.convert.config_json: released bert_config.json and config.json files <-> BertConfig."""

import json
import re

import pytest

from bertjax.convert import config_json
from bertjax.model import BertConfig

GOOGLE_BASE = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}


def write(path, values) -> str:
    path.write_text(json.dumps(values))
    return str(path)


def test_reads_a_google_bert_config(tmp_path):
    path = tmp_path / "bert_config.json"
    # The original's "gelu" is the tanh approximation.
    assert config_json.read(write(path, GOOGLE_BASE)) == BertConfig.from_preset("base")
    config = config_json.read(str(path), dtype="bfloat16", scan_layers=True)
    assert (config.dtype, config.scan_layers) == ("bfloat16", True)
    with pytest.raises(ValueError, match="hidden_act='tanh'"):
        config_json.read(write(path, {**GOOGLE_BASE, "hidden_act": "tanh"}))
    with pytest.raises(ValueError, match="unsupported key.*num_experts"):
        config_json.read(write(path, {**GOOGLE_BASE, "num_experts": 4}))


@pytest.mark.parametrize(
    "hf_act, ours",
    [("gelu", "gelu"), ("gelu_new", "gelu_tanh"), ("gelu_pytorch_tanh", "gelu_tanh")],
)
def test_reads_hugging_face_hidden_acts(tmp_path, hf_act, ours):
    values = {**GOOGLE_BASE, "model_type": "bert", "hidden_act": hf_act, "pad_token_id": 0}
    assert config_json.read(write(tmp_path / "config.json", values)).hidden_act == ours


def test_refuses_hugging_face_keys_that_change_the_architecture(tmp_path):
    values = {**GOOGLE_BASE, "model_type": "bert", "position_embedding_type": "relative_key"}
    with pytest.raises(ValueError, match="position_embedding_type must be 'absolute'"):
        config_json.read(write(tmp_path / "config.json", values))


@pytest.mark.parametrize("hidden_act", ["gelu_tanh", "gelu", "relu"])
def test_to_hf_reads_back(tmp_path, hidden_act):
    config = BertConfig.from_preset("tiny", hidden_act=hidden_act, layer_norm_eps=1e-6)
    values = {"model_type": "bert", **config_json.to_hf(config)}
    assert config_json.read(write(tmp_path / "config.json", values)) == config


# ------------------------------------------------------------------------------ ModernBERT

# transformers 4.48's config.json of answerdotai/ModernBERT-base, its architecture keys
# (paper, Table 4; the 4.x names of the attention pattern and rotary bases).
MODERNBERT_BASE_4X = {
    "model_type": "modernbert",
    "architectures": ["ModernBertForMaskedLM"],
    "vocab_size": 50368,
    "hidden_size": 768,
    "intermediate_size": 1152,
    "num_hidden_layers": 22,
    "num_attention_heads": 12,
    "hidden_activation": "gelu",
    "max_position_embeddings": 8192,
    "norm_eps": 1e-05,
    "norm_bias": False,
    "attention_bias": False,
    "mlp_bias": False,
    "classifier_bias": False,
    "decoder_bias": True,
    "global_attn_every_n_layers": 3,
    "local_attention": 128,
    "global_rope_theta": 160000.0,
    "local_rope_theta": 10000.0,
    "pad_token_id": 50283,
    "cls_token_id": 50281,
    "sep_token_id": 50282,
}


def test_reads_a_transformers_4x_modernbert_config():
    config = config_json.from_modernbert(MODERNBERT_BASE_4X, "config.json")
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (
        22,
        768,
        1152,
    )
    assert (config.global_attention_every, config.local_attention_window) == (3, 128)
    assert (config.rope_theta, config.local_rope_theta) == (160000.0, 10000.0)
    assert (config.use_bias, config.type_vocab_size, config.hidden_act) == (False, 0, "gelu")
    assert config_json.hf_family(config) == "modernbert"


def test_reads_transformers_5x_layer_types_and_rope_parameters():
    transformers = pytest.importorskip("transformers")
    theirs = transformers.ModernBertConfig(
        num_hidden_layers=5, global_attn_every_n_layers=2, local_rope_theta=321.0
    )
    config = config_json.from_modernbert(json.loads(theirs.to_json_string()), "config.json")
    assert config.global_attention_every == 2
    assert (config.rope_theta, config.local_rope_theta) == (160000.0, 321.0)
    # And back: transformers reads what to_modernbert writes as the same model.
    again = transformers.ModernBertConfig(**config_json.to_modernbert(config))
    assert again.layer_types == theirs.layer_types
    assert config_json.from_modernbert(json.loads(again.to_json_string()), "x") == config


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(attention_bias=True), "one setting for norm_bias=False, attention_bias=True"),
        (dict(decoder_bias=False), "decoder_bias must be True"),
        (dict(classifier_pooling="mean"), "classifier_pooling must be 'cls'"),
        (
            dict(hidden_activation="silu", classifier_activation="silu"),
            "hidden_activation='silu' is not one of",
        ),
        (
            dict(layer_types=["full_attention", "full_attention", "sliding_attention"]),
            "layer_types",
        ),
        (dict(rope_parameters={"full_attention": {"rope_type": "yarn"}}), "only default rotary"),
        (dict(position_bias_max=3), "unsupported ModernBERT key(s) position_bias_max"),
    ],
)
def test_modernbert_configs_bertjax_cannot_compute_are_refused(change, message):
    with pytest.raises(ValueError, match=f"config.json: .*{re.escape(message)}"):
        config_json.from_modernbert({**MODERNBERT_BASE_4X, **change}, "config.json")


def test_hf_family_tells_the_two_blocks_and_their_mixes_apart():
    bert = BertConfig.from_preset("tiny")
    assert config_json.hf_family(bert) == "bert"
    modern = config_json.from_modernbert(MODERNBERT_BASE_4X, "config.json")
    assert config_json.hf_family(modern) == "modernbert"
    mixed = BertConfig.from_preset("tiny", norm_placement="pre")
    assert config_json.hf_family(mixed) is None
