"""bertjax.convert.config_json: released bert_config.json and config.json files <-> BertConfig."""

import json

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
