"""The rename table between bertjax parameters and released BERT checkpoints.

Two formats:

    tf  google-research/bert's TF1 checkpoints (tf.compat.v1.train.Saver variable names)
    hf  Hugging Face transformers' BertForPreTraining state dict (as in model.safetensors),
        or ModernBertForMaskedLM's for a model in ModernBERT's shape (MODERNBERT_TABLE)

A fine-tuned model is exported only, and only to hf: the encoder's rows of TABLE
and its head's Dense modules as the Linears its task's transformers class names
(the task's `hf_class`, bertjax/tasks/contract.py). A sentence-transformers export
holds the encoder's rows alone, as the bare BertModel or ModernBertModel names them:
without the HF_ENCODER_PREFIX or MODERNBERT_ENCODER_PREFIX.

Each row of TABLE is (our path, TF name, HF name, layout); `{i}` is a layer
index. A layout says how a source tensor becomes ours: transpose it when that
format stores the matrix [out, in] (PyTorch's Linear, and the original's NSP
`output_weights`), then reshape it to our shape, which may split an axis into
attention heads. Exporting applies the same steps backwards. Our paths are the
per-layer model's; model.stack_layers converts them to the `scan_layers` layout.
"""

import dataclasses
import itertools
import math
import re
from collections.abc import Mapping

import numpy as np

FORMATS = ("tf", "hf")


@dataclasses.dataclass(frozen=True)
class Layout:
    # Formats that store this matrix as [out, in]; ours are [in, out].
    transposed: frozenset[str] = frozenset()
    # How many of our axes make up each source axis; None: the same axes.
    axis_groups: tuple[int, ...] | None = None
    # (k, n): ours is the k-th of n equal blocks of the source's first axis (a fused
    # PyTorch matrix such as ModernBERT's Wqkv), else None.
    part: tuple[int, int] | None = None


SAME = Layout()
KERNEL = Layout(frozenset({"hf"}))
# [H, A * D] -> [H, A, D]: query, key and value kernels.
KERNEL_TO_HEADS = Layout(frozenset({"hf"}), (1, 2))
# [A * D] -> [A, D]: query, key and value biases.
BIAS_TO_HEADS = Layout(axis_groups=(2,))
# [A * D, H] -> [A, D, H]: the attention output kernel.
KERNEL_FROM_HEADS = Layout(frozenset({"hf"}), (2, 1))
# The NSP matrix is [2, H] in both formats.
TRANSPOSED_KERNEL = Layout(frozenset({"tf", "hf"}))


# ModernBERT's fused matrices: Wqkv [3 * A * D, H] holds the query, key and value
# kernels, Wi [2 * I, H] the activated and the gating half of the GeGLU.
def _part(k: int, n: int, layout: Layout) -> Layout:
    return dataclasses.replace(layout, part=(k, n))


# One row a line, as a table.
# fmt: off
TABLE = [
    ("bert/embeddings/word_embeddings/embedding", "bert/embeddings/word_embeddings", "bert.embeddings.word_embeddings.weight", SAME),
    ("bert/embeddings/position_embeddings/embedding", "bert/embeddings/position_embeddings", "bert.embeddings.position_embeddings.weight", SAME),
    ("bert/embeddings/token_type_embeddings/embedding", "bert/embeddings/token_type_embeddings", "bert.embeddings.token_type_embeddings.weight", SAME),
    ("bert/embeddings/LayerNorm/scale", "bert/embeddings/LayerNorm/gamma", "bert.embeddings.LayerNorm.weight", SAME),
    ("bert/embeddings/LayerNorm/bias", "bert/embeddings/LayerNorm/beta", "bert.embeddings.LayerNorm.bias", SAME),
    ("bert/encoder/layer_{i}/attention/query/kernel", "bert/encoder/layer_{i}/attention/self/query/kernel", "bert.encoder.layer.{i}.attention.self.query.weight", KERNEL_TO_HEADS),
    ("bert/encoder/layer_{i}/attention/query/bias", "bert/encoder/layer_{i}/attention/self/query/bias", "bert.encoder.layer.{i}.attention.self.query.bias", BIAS_TO_HEADS),
    ("bert/encoder/layer_{i}/attention/key/kernel", "bert/encoder/layer_{i}/attention/self/key/kernel", "bert.encoder.layer.{i}.attention.self.key.weight", KERNEL_TO_HEADS),
    ("bert/encoder/layer_{i}/attention/key/bias", "bert/encoder/layer_{i}/attention/self/key/bias", "bert.encoder.layer.{i}.attention.self.key.bias", BIAS_TO_HEADS),
    ("bert/encoder/layer_{i}/attention/value/kernel", "bert/encoder/layer_{i}/attention/self/value/kernel", "bert.encoder.layer.{i}.attention.self.value.weight", KERNEL_TO_HEADS),
    ("bert/encoder/layer_{i}/attention/value/bias", "bert/encoder/layer_{i}/attention/self/value/bias", "bert.encoder.layer.{i}.attention.self.value.bias", BIAS_TO_HEADS),
    ("bert/encoder/layer_{i}/attention/output/kernel", "bert/encoder/layer_{i}/attention/output/dense/kernel", "bert.encoder.layer.{i}.attention.output.dense.weight", KERNEL_FROM_HEADS),
    ("bert/encoder/layer_{i}/attention/output/bias", "bert/encoder/layer_{i}/attention/output/dense/bias", "bert.encoder.layer.{i}.attention.output.dense.bias", SAME),
    ("bert/encoder/layer_{i}/attention_LayerNorm/scale", "bert/encoder/layer_{i}/attention/output/LayerNorm/gamma", "bert.encoder.layer.{i}.attention.output.LayerNorm.weight", SAME),
    ("bert/encoder/layer_{i}/attention_LayerNorm/bias", "bert/encoder/layer_{i}/attention/output/LayerNorm/beta", "bert.encoder.layer.{i}.attention.output.LayerNorm.bias", SAME),
    ("bert/encoder/layer_{i}/intermediate/kernel", "bert/encoder/layer_{i}/intermediate/dense/kernel", "bert.encoder.layer.{i}.intermediate.dense.weight", KERNEL),
    ("bert/encoder/layer_{i}/intermediate/bias", "bert/encoder/layer_{i}/intermediate/dense/bias", "bert.encoder.layer.{i}.intermediate.dense.bias", SAME),
    ("bert/encoder/layer_{i}/output/kernel", "bert/encoder/layer_{i}/output/dense/kernel", "bert.encoder.layer.{i}.output.dense.weight", KERNEL),
    ("bert/encoder/layer_{i}/output/bias", "bert/encoder/layer_{i}/output/dense/bias", "bert.encoder.layer.{i}.output.dense.bias", SAME),
    ("bert/encoder/layer_{i}/output_LayerNorm/scale", "bert/encoder/layer_{i}/output/LayerNorm/gamma", "bert.encoder.layer.{i}.output.LayerNorm.weight", SAME),
    ("bert/encoder/layer_{i}/output_LayerNorm/bias", "bert/encoder/layer_{i}/output/LayerNorm/beta", "bert.encoder.layer.{i}.output.LayerNorm.bias", SAME),
    ("bert/pooler/dense/kernel", "bert/pooler/dense/kernel", "bert.pooler.dense.weight", KERNEL),
    ("bert/pooler/dense/bias", "bert/pooler/dense/bias", "bert.pooler.dense.bias", SAME),
    ("predictions/dense/kernel", "cls/predictions/transform/dense/kernel", "cls.predictions.transform.dense.weight", KERNEL),
    ("predictions/dense/bias", "cls/predictions/transform/dense/bias", "cls.predictions.transform.dense.bias", SAME),
    ("predictions/LayerNorm/scale", "cls/predictions/transform/LayerNorm/gamma", "cls.predictions.transform.LayerNorm.weight", SAME),
    ("predictions/LayerNorm/bias", "cls/predictions/transform/LayerNorm/beta", "cls.predictions.transform.LayerNorm.bias", SAME),
    ("predictions/output_bias", "cls/predictions/output_bias", "cls.predictions.bias", SAME),
    ("seq_relationship/kernel", "cls/seq_relationship/output_weights", "cls.seq_relationship.weight", TRANSPOSED_KERNEL),
    ("seq_relationship/bias", "cls/seq_relationship/output_bias", "cls.seq_relationship.bias", SAME),
]
# fmt: on

# Parts of the model a checkpoint may leave out (a BertModel has no heads,
# BertForMaskedLM no pooler and no NSP head); each is all there or all missing.
OPTIONAL_GROUPS = ("bert/pooler", "predictions", "seq_relationship")

# A Dense module of a fine-tuning head as a PyTorch Linear: (our leaf, its leaf, layout).
_LINEAR = [("kernel", "weight", KERNEL), ("bias", "bias", SAME)]


def _linears(head: Mapping[str, str]) -> dict[str, tuple[str, Layout]]:
    """Our path -> (HF name, layout) of a head's Dense modules, {ours: their Linear}."""
    return {
        f"{ours}/{leaf}": (f"{theirs}.{hf_leaf}", layout)
        for ours, theirs in head.items()
        for leaf, hf_leaf, layout in _LINEAR
    }


# Hugging Face's ModernBertForMaskedLM (Warner et al. 2024) against bertjax's model with
# norm_placement='pre', use_bias=False, feed_forward='geglu', position_embedding='rotary',
# type_vocab_size=0 and pooler='norm': (our path, HF name, layout). Layer 0 has no
# attn_norm (model.BertLayer). A ModernBertModel's names lack the "model." prefix.
# fmt: off
MODERNBERT_TABLE = [
    ("bert/embeddings/word_embeddings/embedding", "model.embeddings.tok_embeddings.weight", SAME),
    ("bert/embeddings/LayerNorm/scale", "model.embeddings.norm.weight", SAME),
    ("bert/encoder/layer_{i}/pre_attention_LayerNorm/scale", "model.layers.{i}.attn_norm.weight", SAME),
    ("bert/encoder/layer_{i}/attention/query/kernel", "model.layers.{i}.attn.Wqkv.weight", _part(0, 3, KERNEL_TO_HEADS)),
    ("bert/encoder/layer_{i}/attention/key/kernel", "model.layers.{i}.attn.Wqkv.weight", _part(1, 3, KERNEL_TO_HEADS)),
    ("bert/encoder/layer_{i}/attention/value/kernel", "model.layers.{i}.attn.Wqkv.weight", _part(2, 3, KERNEL_TO_HEADS)),
    ("bert/encoder/layer_{i}/attention/output/kernel", "model.layers.{i}.attn.Wo.weight", KERNEL_FROM_HEADS),
    ("bert/encoder/layer_{i}/pre_mlp_LayerNorm/scale", "model.layers.{i}.mlp_norm.weight", SAME),
    ("bert/encoder/layer_{i}/intermediate/kernel", "model.layers.{i}.mlp.Wi.weight", _part(0, 2, KERNEL)),
    ("bert/encoder/layer_{i}/gate/kernel", "model.layers.{i}.mlp.Wi.weight", _part(1, 2, KERNEL)),
    ("bert/encoder/layer_{i}/output/kernel", "model.layers.{i}.mlp.Wo.weight", KERNEL),
    ("bert/encoder/final_LayerNorm/scale", "model.final_norm.weight", SAME),
    ("predictions/dense/kernel", "head.dense.weight", KERNEL),
    ("predictions/LayerNorm/scale", "head.norm.weight", SAME),
    ("predictions/output_bias", "decoder.bias", SAME),
]
# fmt: on
MODERNBERT_TIED = {"decoder.weight": "model.embeddings.tok_embeddings.weight"}
MODERNBERT_ENCODER_PREFIX = "model."
# ModernBERT's fine-tuning classes share one `head` (dense, activation, norm: our pooler
# with pooler='norm') before their Linear.
_MODERNBERT_HEAD = [
    ("bert/pooler/dense/kernel", "head.dense.weight", KERNEL),
    ("bert/pooler/LayerNorm/scale", "head.norm.weight", SAME),
]


def modernbert_names(
    num_layers: int, head: Mapping[str, str] | None = None, pooler: bool = True
) -> dict[str, tuple[str, Layout]]:
    """Our path -> (the name in a transformers ModernBERT class, layout), every layer
    spelled out: ModernBertForMaskedLM's (head None), or a fine-tuning class's, whose
    Linears are our Dense modules `head` names ({ours: theirs}) and whose `head` is our
    pooler (when `pooler`)."""
    table = {
        path.format(i=i): (name.format(i=i), layout)
        for path, name, layout in MODERNBERT_TABLE
        for i in (range(num_layers) if "{i}" in path else [None])
        if not (i == 0 and "attn_norm" in name)
    }
    if head is None:
        return table
    encoder = {path: entry for path, entry in table.items() if path.startswith("bert/")}
    pooled = {path: (name, layout) for path, name, layout in _MODERNBERT_HEAD} if pooler else {}
    return {**encoder, **pooled, **_linears(head)}


# Hugging Face names of tensors tied to another one: the MLM decoder is the
# word embedding table and its bias the MLM output bias.
HF_TIED = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}
# A Hugging Face BertModel (no heads) names its tensors without this prefix.
HF_ENCODER_PREFIX = "bert."
# Tensors that are not parameters: HF's position-id buffer, the original's
# step counter and Adam moments (run_pretraining.py's AdamWeightDecayOptimizer slots).
IGNORED = {
    "hf": re.compile(r"(bert\.)?embeddings\.position_ids"),
    "tf": re.compile(r"global_step|.*/adam_[mv]"),
}


def group_of(path: str) -> str | None:
    """The optional group an our-side path belongs to, or None (always required)."""
    for group in OPTIONAL_GROUPS:
        if path.startswith(group + "/"):
            return group
    return None


def names(
    fmt: str, num_layers: int, head: Mapping[str, str] | None = None, pooler: bool = True
) -> dict[str, tuple[str, Layout]]:
    """Our path -> (the format's name, layout), every layer spelled out: of the pretraining
    model (head None), or in hf of a fine-tuning class, whose Linears are our Dense
    modules `head` names ({ours: theirs}), with BERT's pooler when `pooler`."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: must be one of {', '.join(FORMATS)}")
    if head is not None and fmt != "hf":
        raise ValueError(f"no {fmt} names for a fine-tuned model")
    column = FORMATS.index(fmt) + 1
    table = {
        row[0].format(i=i): (row[column].format(i=i), row[3])
        for row in TABLE
        for i in (range(num_layers) if "{i}" in row[0] else [None])
    }
    if head is None:
        return table
    encoder = {
        path: entry
        for path, entry in table.items()
        if path.startswith("bert/") and (pooler or group_of(path) != "bert/pooler")
    }
    return {**encoder, **_linears(head)}


def source_shape(layout: Layout, fmt: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape the format stores for our parameter of `shape`."""
    shape = _part_shape(layout, fmt, shape)
    if layout.part is None:
        return shape
    return (shape[0] * layout.part[1], *shape[1:])


def _part_shape(layout: Layout, fmt: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    if layout.axis_groups is not None:
        bounds = itertools.accumulate(layout.axis_groups, initial=0)
        shape = tuple(math.prod(shape[a:b]) for a, b in itertools.pairwise(bounds))
    return tuple(reversed(shape)) if fmt in layout.transposed else tuple(shape)


def to_ours(value: np.ndarray, layout: Layout, fmt: str, shape: tuple[int, ...]) -> np.ndarray:
    """The format's tensor as our parameter of `shape` (its shape already checked)."""
    if layout.part is not None:
        k, n = layout.part
        value = np.split(value, n, axis=0)[k]
    if fmt in layout.transposed:
        value = value.T
    return np.ascontiguousarray(value).reshape(shape)


def from_ours(value: np.ndarray, layout: Layout, fmt: str) -> np.ndarray:
    """Our parameter as the format stores it; of a `part` layout, its block only (the
    blocks of one tensor are concatenated along axis 0 in the order of k)."""
    value = np.asarray(value)
    shape = _part_shape(layout, fmt, value.shape)
    if fmt in layout.transposed:
        return np.ascontiguousarray(value.reshape(tuple(reversed(shape))).T)
    return value.reshape(shape)
