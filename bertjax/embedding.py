"""Sentence embeddings: how a workdir turns a text into one vector, the same in the
retrieval task's training, `bertjax.embed`, retrieval evaluation and export.

A text is read as `[CLS] text [SEP]`, cut to `max_seq_length` tokens (the first
ones, then [SEP]), through the encoder; its final hidden states are pooled
(sentence-transformers' Pooling module, whose mode names these are):

    mean   the mean over the text's tokens, [CLS] and [SEP] included (the attention mask)
    cls    the state at [CLS]
    last   the state at the last token, [SEP]

and, with `normalize`, divided by their L2 norm (its Normalize module), so that a dot
product is the cosine. A workdir's task.json holds its `Pooling` ("embedding"); a
workdir without one embeds as `Pooling()` says.
"""

import dataclasses

import jax.numpy as jnp
from flax import linen as nn

from bertjax.model import BertConfig, BertModel

POOLINGS = ("mean", "cls", "last")


@dataclasses.dataclass(frozen=True)
class Pooling:
    mode: str = "mean"
    normalize: bool = False
    # Tokens an embedder reads, [CLS] and [SEP] included; longer texts are cut to it.
    # 0: the workdir's own max_seq_length.
    max_seq_length: int = 0

    def __post_init__(self):
        if self.mode not in POOLINGS:
            raise ValueError(f"pooling={self.mode!r}: use one of {', '.join(POOLINGS)}")
        if self.max_seq_length < 0 or self.max_seq_length in (1, 2):
            raise ValueError(
                f"max_seq_length={self.max_seq_length}: must be 0 (the workdir's) or at least 3"
            )

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, values: dict | None) -> "Pooling":
        return cls(**(values or {}))


def pool(hidden, input_mask, pooling: Pooling):
    """float [..., L, H] final hidden states and int [..., L] input_mask (right-padded)
    -> float32 [..., H], one vector per text."""
    hidden = hidden.astype(jnp.float32)
    mask = (input_mask > 0).astype(jnp.float32)
    if pooling.mode == "cls":
        vectors = hidden[..., 0, :]
    elif pooling.mode == "last":
        last = jnp.maximum(jnp.sum(mask, axis=-1).astype(jnp.int32) - 1, 0)
        vectors = jnp.take_along_axis(hidden, last[..., None, None], axis=-2)[..., 0, :]
    else:
        total = jnp.einsum("...lh,...l->...h", hidden, mask)
        vectors = total / jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0)
    if pooling.normalize:
        norm = jnp.linalg.norm(vectors, axis=-1, keepdims=True)
        vectors = vectors / jnp.maximum(norm, 1e-12)  # sentence-transformers' epsilon
    return vectors


class BertForEmbedding(nn.Module):
    """One vector per text: BertModel's final hidden states, pooled (its pooler is neither
    used nor created). `embed` takes int [..., L] inputs (any leading shape) to float32
    [..., H]; called, it embeds the retrieval task's batches: queries [B, Lq] and the
    `passages` of each row side by side, [B, passages * Lp], to ([B, H], [B, passages, H]).
    Lq and Lp are the batch's own (retrieval_input pads to a few lengths)."""

    config: BertConfig
    pooling: Pooling
    passages: int = 1  # per row of a batch

    def setup(self):
        self.bert = BertModel(self.config)

    def embed(self, input_ids, input_mask, *, deterministic: bool):
        shape = input_ids.shape
        ids, mask = input_ids.reshape(-1, shape[-1]), input_mask.reshape(-1, shape[-1])
        hidden = self.bert.sequence_output(
            ids, mask, jnp.zeros_like(ids), deterministic=deterministic
        )
        vectors = pool(hidden, mask, self.pooling)
        return vectors.reshape(*shape[:-1], vectors.shape[-1])

    def __call__(self, query_ids, query_mask, passage_ids, passage_mask, *, deterministic: bool):
        shape = (passage_ids.shape[0], self.passages, -1)
        passages = self.embed(
            passage_ids.reshape(shape),
            passage_mask.reshape(shape),
            deterministic=deterministic,
        )
        return self.embed(query_ids, query_mask, deterministic=deterministic), passages
