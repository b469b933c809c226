"""bertjax.convert.param_names: the rename table both ways, its layouts at a model's own
shapes, the optional groups, and the names that are not parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from flax import traverse_util

from bertjax.convert import param_names
from bertjax.model import BertConfig, BertForPreTraining

# The rows without a layer index: 5 embedding rows, the pooler's 2, the MLM head's 5 and
# the NSP head's 2; and 16 rows per layer.
FIXED_ROWS, ROWS_PER_LAYER = 14, 16


@pytest.mark.parametrize("fmt", param_names.FORMATS)
@pytest.mark.parametrize("num_layers", [0, 1, 3])
def test_every_name_maps_to_one_name_of_the_format_and_back(fmt, num_layers):
    table = param_names.names(fmt, num_layers)
    assert len(table) == FIXED_ROWS + ROWS_PER_LAYER * num_layers
    back = {name: ours for ours, (name, _) in table.items()}
    assert len(back) == len(table)  # no two of ours share a name of the format
    assert {ours: (name, table[ours][1]) for name, ours in back.items()} == table
    assert not any("{i}" in ours or "{i}" in name for ours, (name, _) in table.items())


def test_layer_indices_are_spelt_out_up_to_the_last_layer():
    table = param_names.names("hf", 3)
    assert table["bert/encoder/layer_2/attention/query/kernel"] == (
        "bert.encoder.layer.2.attention.self.query.weight",
        param_names.KERNEL_TO_HEADS,
    )
    layers = {path.split("/")[2] for path in table if path.startswith("bert/encoder/")}
    assert layers == {"layer_0", "layer_1", "layer_2"}
    tf = param_names.names("tf", 12)
    assert tf["bert/encoder/layer_11/output_LayerNorm/scale"] == (
        "bert/encoder/layer_11/output/LayerNorm/gamma",
        param_names.SAME,
    )


def test_hugging_face_spells_bertformpretrainings_state_dict():
    hf = {ours: name for ours, (name, _) in param_names.names("hf", 1).items()}
    layer = "bert/encoder/layer_0/"
    assert hf["bert/embeddings/LayerNorm/scale"] == "bert.embeddings.LayerNorm.weight"
    assert hf["bert/embeddings/LayerNorm/bias"] == "bert.embeddings.LayerNorm.bias"
    assert (
        hf[layer + "attention/output/kernel"]
        == "bert.encoder.layer.0.attention.output.dense.weight"
    )
    assert hf[layer + "intermediate/kernel"] == "bert.encoder.layer.0.intermediate.dense.weight"
    assert hf[layer + "output_LayerNorm/bias"] == "bert.encoder.layer.0.output.LayerNorm.bias"
    assert hf["bert/pooler/dense/kernel"] == "bert.pooler.dense.weight"
    assert hf["predictions/output_bias"] == "cls.predictions.bias"
    assert hf["predictions/dense/kernel"] == "cls.predictions.transform.dense.weight"
    assert hf["seq_relationship/kernel"] == "cls.seq_relationship.weight"


@pytest.mark.parametrize("fmt, encoder, heads", [("hf", "bert.", "cls."), ("tf", "bert/", "cls/")])
def test_encoder_names_carry_the_encoders_prefix_and_head_names_the_heads(fmt, encoder, heads):
    for ours, (name, _) in param_names.names(fmt, 2).items():
        assert name.startswith(encoder if ours.startswith("bert/") else heads), (ours, name)
    assert param_names.HF_ENCODER_PREFIX == "bert."


def test_hugging_faces_tied_tensors_point_at_names_of_the_table():
    hf_names = {name for name, _ in param_names.names("hf", 1).values()}
    assert set(param_names.HF_TIED.values()) <= hf_names
    assert not set(param_names.HF_TIED) & hf_names  # the aliases themselves are dropped


@pytest.mark.parametrize(
    "path, group",
    [
        ("bert/pooler/dense/kernel", "bert/pooler"),
        ("predictions/output_bias", "predictions"),
        ("predictions/LayerNorm/scale", "predictions"),
        ("seq_relationship/bias", "seq_relationship"),
        ("bert/embeddings/word_embeddings/embedding", None),
        ("bert/encoder/layer_0/output/kernel", None),
        ("predictionsX/bias", None),  # a group is a whole path component
        ("bert/pooler", None),
    ],
)
def test_group_of(path, group):
    assert param_names.group_of(path) == group


def test_every_optional_group_has_rows_and_the_encoder_is_required():
    groups = {}
    for ours in param_names.names("tf", 1):
        groups.setdefault(param_names.group_of(ours), []).append(ours)
    assert set(groups) == {None, *param_names.OPTIONAL_GROUPS}
    assert [len(groups[g]) for g in param_names.OPTIONAL_GROUPS] == [2, 5, 2]
    assert all(ours.startswith(("bert/embeddings/", "bert/encoder/")) for ours in groups[None])


@pytest.mark.parametrize(
    "fmt, name, ignored",
    [
        ("hf", "bert.embeddings.position_ids", True),
        ("hf", "embeddings.position_ids", True),  # a BertModel's, without the prefix
        ("hf", "bert.embeddings.position_ids.extra", False),
        ("hf", "bert.embeddings.position_embeddings.weight", False),
        ("tf", "global_step", True),
        ("tf", "bert/encoder/layer_3/output/dense/kernel/adam_m", True),
        ("tf", "cls/predictions/output_bias/adam_v", True),
        ("tf", "bert/encoder/layer_3/output/dense/kernel", False),
        ("tf", "global_step_1", False),
    ],
)
def test_names_that_are_not_parameters(fmt, name, ignored):
    assert bool(param_names.IGNORED[fmt].fullmatch(name)) == ignored


# H=4, A=2, D=3, I=5.
@pytest.mark.parametrize(
    "layout, ours, tf, hf",
    [
        (param_names.SAME, (7, 4), (7, 4), (7, 4)),
        (param_names.KERNEL, (4, 5), (4, 5), (5, 4)),
        (param_names.KERNEL_TO_HEADS, (4, 2, 3), (4, 6), (6, 4)),
        (param_names.BIAS_TO_HEADS, (2, 3), (6,), (6,)),
        (param_names.KERNEL_FROM_HEADS, (2, 3, 4), (6, 4), (4, 6)),
        (param_names.TRANSPOSED_KERNEL, (4, 2), (2, 4), (2, 4)),
    ],
)
def test_source_shape_of_each_layout(layout, ours, tf, hf):
    assert param_names.source_shape(layout, "tf", ours) == tf
    assert param_names.source_shape(layout, "hf", ours) == hf


def test_heads_are_split_from_the_source_axis_head_major():
    ours = np.arange(24.0).reshape(4, 2, 3)  # [H, A, D]
    tf = param_names.from_ours(ours, param_names.KERNEL_TO_HEADS, "tf")  # [H, A * D]
    np.testing.assert_array_equal(tf[:, 1 * 3 + 2], ours[:, 1, 2])
    out = np.arange(24.0).reshape(2, 3, 4)  # [A, D, H]
    hf = param_names.from_ours(out, param_names.KERNEL_FROM_HEADS, "hf")  # [H, A * D]
    np.testing.assert_array_equal(hf[:, 1 * 3 + 0], out[1, 0, :])
    nsp = np.arange(8.0).reshape(4, 2)  # [H, 2]
    for fmt in param_names.FORMATS:
        stored = param_names.from_ours(nsp, param_names.TRANSPOSED_KERNEL, fmt)
        np.testing.assert_array_equal(stored, nsp.T)
        assert stored.flags.c_contiguous


def test_every_row_converts_a_models_parameter_both_ways():
    config = BertConfig(
        num_hidden_layers=2,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=24,
        vocab_size=40,
        max_position_embeddings=12,
    )
    ids = jnp.zeros((1, 4), jnp.int32)
    shapes = jax.eval_shape(
        lambda: nn.unbox(
            BertForPreTraining(config).init(
                jax.random.key(0), ids, ids, ids, ids[:, :1], deterministic=True
            )["params"]
        )
    )
    shapes = {path: x.shape for path, x in traverse_util.flatten_dict(shapes, sep="/").items()}
    rng = np.random.default_rng(0)
    for fmt in param_names.FORMATS:
        table = param_names.names(fmt, config.num_hidden_layers)
        assert set(table) == set(shapes)
        for path, (name, layout) in table.items():
            ours = rng.normal(size=shapes[path]).astype(np.float32)
            stored = param_names.from_ours(ours, layout, fmt)
            assert stored.ndim <= 2, name  # both formats store matrices and vectors
            assert stored.shape == param_names.source_shape(layout, fmt, ours.shape), name
            back = param_names.to_ours(stored, layout, fmt, ours.shape)
            np.testing.assert_array_equal(back, ours, err_msg=name)
    query = param_names.names("hf", 1)["bert/encoder/layer_0/attention/query/kernel"][1]
    assert param_names.source_shape(
        query, "hf", shapes["bert/encoder/layer_0/attention/query/kernel"]
    ) == (16, 16)


def test_an_unknown_format_is_an_error_naming_it():
    with pytest.raises(ValueError, match="^format 'pt': must be one of "):
        param_names.names("pt", 1)
