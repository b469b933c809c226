"""Using a trained or converted checkpoint from Python (a notebook, a script).

    import bertjax
    restored = bertjax.restore("demo_out")          # latest step; step=N for another
    bertjax.fill_mask(restored, "The [MASK] statement raises an exception.")
    out = bertjax.encode(restored, ["first text", "second text"])
    vectors = bertjax.embed(restored, texts)         # [N, hidden], as the workdir embeds
    bertjax.next_sentence(restored, "A sentence.", "The one after it?")

`restore` takes a pretraining workdir, one written by `bertjax.convert
import`, or a fine-tuning workdir. It restores onto the first local device,
whatever mesh wrote the checkpoint, or sharded over `mesh` when one is given.
Encoder layers come back in the loop layout (`layer_0`, `layer_1`, ...) even
from a `scan_layers` run, so notebooks can index them.

A fine-tuned workdir brings its head, and answers in its task's terms:

    restored = bertjax.restore("runs/mrpc")
    bertjax.classify(restored, ["The cat sat."], pairs=["A cat was sitting."])
    bertjax.tag(restored, "John lives in Berlin")           # runs/ner
    bertjax.answer(restored, "Who wrote it?", "It was written by Ada.")  # runs/squad

encode/embed/attention_maps work on every workdir; fill_mask and
next_sentence need the pretraining heads.
"""

import dataclasses
import functools
import os
import signal
import threading
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from flax import linen as nn

from bertjax import checkpoint, sharding, tasks
from bertjax import workdir as workdir_lib
from bertjax.embedding import BertForEmbedding, Pooling
from bertjax.model import BertConfig, BertForPreTraining, BertModel, unstack_layers
from bertjax.tasks.contract import Description
from bertjax.tasks.finetune import MODEL_INPUTS
from bertjax.workdir import CheckpointError
from data_pipeline import config as data_config_lib
from data_pipeline.finetune import records
from data_pipeline.progress import Progress
from data_pipeline.tokenizer import make_tokenizer


@dataclasses.dataclass
class Restored:
    """A model with its parameters, config and tokenizer."""

    model: nn.Module  # BertForPreTraining, or a fine-tuning task's model
    params: Any
    config: BertConfig
    tokenizer: Any
    step: int
    # The sequence length the run trained with; longer inputs are refused.
    max_seq_length: int
    kind: str  # the task's name
    task: Description  # the rest of the workdir's task.json

    def require(self, kind: str, what: str) -> None:
        """Fails unless the restored model is of the task `what` needs (a task's own
        notebook function asks for its task)."""
        if self.kind != kind:
            raise ValueError(f"{what} needs a {kind} workdir; this is a {self.kind} workdir")

    def require_pretraining_heads(self, what: str) -> None:
        """Fails unless the model has the pretraining heads, whatever its task is called."""
        if not isinstance(self.model, BertForPreTraining):
            raise ValueError(f"{what} needs a pretraining workdir; this is a {self.kind} workdir")

    @property
    def pooling(self) -> Pooling:
        """How the workdir embeds a text (its task.json's, else embedding.Pooling())."""
        return Pooling.from_json(self.task.embedding)

    def apply(self, features: dict):
        """The model's outputs for a dict of NumPy input features: one compiled program
        per shape of the inputs (run op by op, a small model's first call compiled over a
        hundred programs)."""
        inputs = (np.asarray(features[name], np.int32) for name in MODEL_INPUTS)
        return _apply(self.model, self.params, *inputs)


@functools.partial(jax.jit, static_argnums=0)
def _apply(model, params, *inputs):
    return model.apply({"params": params}, *inputs, deterministic=True)


def restore(path: str, step: int | None = None, mesh: jax.sharding.Mesh | None = None) -> Restored:
    """Restores a workdir's checkpoint (latest or `step`), on one device or over `mesh`."""
    saved_config = workdir_lib.read_model_config(path)
    if saved_config is None:
        raise CheckpointError(
            f"{path}: no {workdir_lib.MODEL_CONFIG_FILE}; expected a bertjax workdir "
            "(a training run or the output of `python -m bertjax.convert import`)"
        )
    tokenizer_data = workdir_lib.read_tokenizer_data(path)
    kind, values = workdir_lib.read_task(path)
    task_file = os.path.join(path, workdir_lib.TASK_FILE)
    task = Description.from_json(values, where=task_file)
    make_model = tasks.get(kind, where=f"{task_file}: kind").make_model
    vocab_file = workdir_lib.require_vocab_file(path, what="workdir")
    tokenizer = make_tokenizer(data_config_lib.from_config(tokenizer_data), vocab_file)
    if step is None and checkpoint.latest_step(path) is None:
        raise CheckpointError(f"{path}: no checkpoint to restore")

    # The checkpoint's own layout first; then the loop layout for inference.
    saved_model = make_model(saved_config, task)
    _end_quietly_on_sigterm()
    boxed = jax.eval_shape(lambda rng: _init(saved_model, rng), jax.random.key(0))
    if mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        shardings = jax.tree.map(lambda _: device, nn.meta.unbox(boxed))
    else:
        shardings = sharding.logical_shardings(boxed, mesh)
    abstract = jax.tree.map(
        lambda leaf, s: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=s),
        nn.meta.unbox(boxed),
        shardings,
    )
    # Without `step`, the newest checkpoint that verifies.
    params, step = checkpoint.restore_params(path, abstract, step)
    # The attention kernel is the run's choice, not the model's: XLA's runs anywhere.
    config = dataclasses.replace(
        saved_config, scan_layers=False, remat_policy="none", attention_implementation="xla"
    )
    params = {**params, "bert": unstack_layers(params["bert"], config.num_hidden_layers)}
    return Restored(
        model=make_model(config, task),
        params=params,
        config=config,
        tokenizer=tokenizer,
        step=step,
        max_seq_length=min(task.max_seq_length, config.max_position_embeddings),
        kind=kind,
        task=task,
    )


def _end_quietly_on_sigterm() -> None:
    """Once jax has started: SIGTERM ends the process as it would without libtpu.

    libtpu, when installed on a host without a TPU (to compile for one), puts a
    crash reporter on SIGTERM that prints a page of stack trace, as when Jupyter
    stops a kernel that is slow to exit. Python does not see that handler
    (signal.getsignal still says SIG_DFL, or None), so setting the default again
    removes it; a handler the program set (a tool's preemption handler) is left.
    """
    jax.local_devices()  # starts the backends, which install the reporter
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _init(model: nn.Module, rng):
    ids = jnp.zeros((1, 8), jnp.int32)
    if isinstance(model, BertForEmbedding):
        return model.init(rng, ids, ids, deterministic=True, method=BertForEmbedding.embed)[
            "params"
        ]
    extra = (ids[:, :1],) if isinstance(model, BertForPreTraining) else ()
    return model.init(rng, ids, ids, ids, *extra, deterministic=True)["params"]


# --------------------------------------------------------------------------- inputs


def _pack(restored: Restored, texts_a: Sequence[str], texts_b: Sequence[str] | None = None):
    """[CLS] A [SEP] (B [SEP]) per row, padded to the longest row: numpy ids, mask, segments.

    Texts longer than the run's max_seq_length are refused rather than cut: a
    notebook answer about a silently truncated text would mislead.
    """
    vocab = restored.tokenizer.vocab
    if isinstance(texts_a, str):
        raise TypeError("pass a list of texts, not one string")
    tokens_a = restored.tokenizer.tokenize(tf.constant(list(texts_a), tf.string)).to_list()
    tokens_b = (
        restored.tokenizer.tokenize(tf.constant(list(texts_b), tf.string)).to_list()
        if texts_b is not None
        else [None] * len(tokens_a)
    )
    rows = []
    for index, (a, b) in enumerate(zip(tokens_a, tokens_b, strict=True)):
        ids = [vocab.cls_id, *a, vocab.sep_id]
        segments = [0] * len(ids)
        if b is not None:
            ids += [*b, vocab.sep_id]
            segments += [1] * (len(b) + 1)
        if len(ids) > restored.max_seq_length:
            raise ValueError(
                f"text {index} is {len(ids)} tokens with [CLS]/[SEP], longer than the "
                f"model's max_seq_length {restored.max_seq_length}"
            )
        rows.append((ids, segments))
    length = max(len(ids) for ids, _ in rows)
    input_ids = np.zeros((len(rows), length), np.int32)
    segment_ids = np.zeros_like(input_ids)
    input_mask = np.zeros_like(input_ids)
    for row, (ids, segments) in enumerate(rows):
        input_ids[row, : len(ids)] = ids
        segment_ids[row, : len(ids)] = segments
        input_mask[row, : len(ids)] = 1
    return input_ids, input_mask, segment_ids


# --------------------------------------------------------------------------- helpers


def encode(restored: Restored, texts: Sequence[str], pairs: Sequence[str] | None = None) -> dict:
    """The encoder's outputs for `texts` (each paired with `pairs[i]` when given), as NumPy.

    Returns `sequence_output` [N, L, H], `pooled_output` [N, H] (None of a model
    pretrained with masked LM alone, which has no pooler), and the `input_ids`,
    `input_mask`, `segment_ids` [N, L] they were computed from (L: the longest text in
    tokens; rows are padded with input_mask 0).
    """
    input_ids, input_mask, segment_ids = _pack(restored, texts, pairs)
    bert = {"params": restored.params["bert"]}
    if "pooler" in restored.params["bert"]:
        sequence_output, pooled_output = BertModel(restored.config).apply(
            bert, input_ids, input_mask, segment_ids, deterministic=True
        )
    else:  # pretrained with masked LM alone: no pooler, and None for its output
        every = np.broadcast_to(np.arange(input_ids.shape[1], dtype=np.int32), input_ids.shape)
        sequence_output = BertModel(restored.config).apply(
            bert,
            input_ids,
            input_mask,
            segment_ids,
            every,
            deterministic=True,
            method=BertModel.hidden_states_at,
        )
        pooled_output = None
    return {
        "sequence_output": np.asarray(sequence_output, np.float32),
        "pooled_output": None if pooled_output is None else np.asarray(pooled_output, np.float32),
        "input_ids": input_ids,
        "input_mask": input_mask,
        "segment_ids": segment_ids,
    }


def embed(
    restored: Restored,
    texts: Sequence[str],
    pooling: str | None = None,
    *,
    normalize: bool | None = None,
    truncate: bool = True,
    batch_size: int = 64,
    progress: Progress | None = None,
) -> np.ndarray:
    """One vector per text, float32 [N, H], as the workdir embeds (bertjax/embedding.py):
    its pooling and normalization, or `pooling` ('mean', 'cls', 'last') and `normalize`
    given here. A text longer than the embedder's max_seq_length is cut to it, as
    sentence-transformers and MTEB cut it; `truncate=False` refuses it instead.
    `progress` counts the batches (ceil(N / batch_size)) as they are embedded.

    Texts of similar length are batched together and padded to one of a few lengths (and
    a batch of fewer texts to a power of two rows), so a corpus of any size compiles a
    handful of times; the order of `texts` is kept.
    """
    if isinstance(texts, str):
        raise TypeError("pass a list of texts, not one string")
    settings = restored.pooling
    if pooling is not None:
        settings = dataclasses.replace(settings, mode=pooling)
    if normalize is not None:
        settings = dataclasses.replace(settings, normalize=normalize)
    length = min(
        settings.max_seq_length or restored.max_seq_length,
        restored.config.max_position_embeddings,
    )
    flat, splits = records.tokenize_texts(restored.tokenizer, list(texts))
    pieces = np.diff(splits)
    if not truncate and np.any(pieces + 2 > length):
        index = int(np.argmax(pieces + 2 > length))
        raise ValueError(
            f"text {index} is {pieces[index] + 2} tokens with [CLS]/[SEP], longer than the "
            f"embedder's max_seq_length {length}"
        )
    kept = np.minimum(pieces, length - 2)
    module = BertForEmbedding(restored.config, settings)
    params = {"bert": restored.params["bert"]}
    vocab = restored.tokenizer.vocab
    out = np.zeros((len(texts), restored.config.hidden_size), np.float32)
    order = np.argsort(kept, kind="stable")
    for begin in range(0, len(order), batch_size):
        rows = order[begin : begin + batch_size]
        width = records.power_of_two_width(int(kept[rows].max()) + 2, length)
        # A batch short of batch_size (the last, or a few texts) to a power of two rows.
        padded = min(batch_size, 1 << (len(rows) - 1).bit_length())
        input_ids = np.full((padded, width), vocab.pad_id, np.int32)
        input_mask = np.zeros_like(input_ids)
        for row, index in enumerate(rows):
            ids = flat[splits[index] : splits[index] + kept[index]]
            input_ids[row, : kept[index] + 2] = [vocab.cls_id, *ids, vocab.sep_id]
            input_mask[row, : kept[index] + 2] = 1
        vectors = _embed_batch(module, params, input_ids, input_mask)
        out[rows] = np.asarray(vectors)[: len(rows)]
        if progress is not None:
            progress.advance()
    return out


@functools.partial(jax.jit, static_argnums=0)
def _embed_batch(module, params, input_ids, input_mask):
    return module.apply(
        {"params": params},
        input_ids,
        input_mask,
        deterministic=True,
        method=BertForEmbedding.embed,
    )


def next_sentence(restored: Restored, first: str, second: str) -> float:
    """The model's probability that `second` follows `first` (the NSP head's IsNext)."""
    restored.require_pretraining_heads("next_sentence")
    if not restored.model.next_sentence:
        raise ValueError(
            "next_sentence needs the NSP head; this workdir was pretrained with masked LM "
            "alone (config.data.next_sentence_prediction=False)"
        )
    input_ids, input_mask, segment_ids = _pack(restored, [first], [second])
    _, nsp_logits = restored.model.apply(
        {"params": restored.params},
        input_ids,
        input_mask,
        segment_ids,
        np.zeros((1, 1), np.int32),
        deterministic=True,
    )
    # Label 0 is IsNext, as in the original data and data_pipeline.
    return float(jax.nn.softmax(nsp_logits[0])[0])


def attention_maps(restored: Restored, text: str) -> tuple[np.ndarray, list[str]]:
    """Attention probabilities of every layer and head for one text: [layers, heads, L, L].

    jax.nn.dot_product_attention does not return its probabilities, so they are
    recomputed from the captured query and key projections (the same softmax
    of q.k / sqrt(head_dim); no padding in a single text).
    """
    input_ids, input_mask, segment_ids = _pack(restored, [text])
    _, state = BertModel(restored.config).apply(
        {"params": restored.params["bert"]},
        input_ids,
        input_mask,
        segment_ids,
        deterministic=True,
        capture_intermediates=lambda module, _: module.name in ("query", "key"),
        mutable=["intermediates"],
    )
    encoder = state["intermediates"]["encoder"]
    maps = []
    for i in range(restored.config.num_hidden_layers):
        attention = encoder[f"layer_{i}"]["attention"]
        query = attention["query"]["__call__"][0][0].astype(jnp.float32)
        key = attention["key"]["__call__"][0][0].astype(jnp.float32)
        scores = jnp.einsum("qnh,knh->nqk", query, key) / np.sqrt(query.shape[-1])
        maps.append(np.asarray(jax.nn.softmax(scores, axis=-1)))
    return np.stack(maps), restored.tokenizer.vocab.decode(input_ids[0])
