r"""A workdir as a TensorFlow SavedModel that takes text: the tokenizer in the graph, the
model through jax2tf, for TF Serving, Vertex AI or any process with tensorflow and
tensorflow_text (no jax, no bertjax).

    python -m bertjax.convert export --format savedmodel WORKDIR OUT

Two signatures, both with a symbolic batch dimension:
- `serving_default` takes the task's texts (tf.string [B]: `text`, and `text_pair` for a
  task of pairs), tokenizes them with the workdir's own tokenizer (data_pipeline/
  tokenizer.py: the same tensorflow-text ops the training input ran, its vocabulary a
  constant of the graph, not a file), lays them out as the task's training examples
  were, and returns the task's answers (Task.serving, bertjax/tasks/contract.py);
- `serve_ids` takes the model's int32 [B, L] inputs (any L up to the model's
  positions), for text tokenized elsewhere, and returns the same outputs (a reader's:
  its rows' start_logits and end_logits).

serving_default pads a batch to the shortest of a few lengths (BUCKETS) that holds its
longest text: the model is converted once, its sequence length symbolic, and the
runtime compiles it for each length it meets.

Both take an empty batch, and any other request with a dimension of 0 (a tagger's
texts without a word), and answer it with empty outputs (`guarded`): jax2tf's symbolic
dimensions are at least 1, so the converted model alone refuses them.

The model is converted once for every platform jax2tf lowers it for (CPU, GPU, TPU), so
the SavedModel serves on any of them. A byte-level BPE tokenizer (ModernBERT's) runs in
Python, not in TensorFlow ops, so its workdirs are refused.
"""

import dataclasses

import jax
import tensorflow as tf

from bertjax import inference, tasks
from bertjax import workdir as workdir_lib
from bertjax.convert import destination
from bertjax.convert.errors import ConversionError
from data_pipeline.finetune.records import bucket_lengths
from data_pipeline.vocab import load_vocab

SIGNATURE_TEXT = "serving_default"
SIGNATURE_IDS = "serve_ids"
PLATFORMS = ("cpu", "cuda", "tpu")
# serving_default pads a batch to the shortest of this many lengths that holds its
# longest text (records.bucket_lengths: the maximum and halvings of it).
BUCKETS = 3


def export_savedmodel(
    workdir: str, out_dir: str, step: int | None = None, max_seq_length: int | None = None
) -> dict:
    """Writes OUT as a SavedModel of WORKDIR's checkpoint `step` (default: the latest),
    its texts cut to `max_seq_length` tokens (default: the workdir's); returns
    {'out_dir', 'step', 'texts', 'outputs', 'length'}."""
    from orbax.export import ExportManager, JaxModule

    out_dir = workdir_lib.absolute(out_dir)
    task = _check(workdir, out_dir)
    restored = inference.restore(workdir, step)
    if max_seq_length is not None:
        restored = with_length(restored, max_seq_length)
    try:
        serving = task.serving(restored)
    except ValueError as e:
        raise ConversionError(f"--max_seq_length={restored.max_seq_length}: {e}") from None
    limit = restored.config.max_position_embeddings
    module = JaxModule(
        jax.device_get(restored.params),
        {"model": serving.forward},
        input_polymorphic_shape={"model": dict(serving.inputs)},
        jax2tf_kwargs={
            "model": {
                "native_serialization_platforms": PLATFORMS,
                "polymorphic_constraints": (f"l <= {limit}",),
            }
        },
    )
    model = guarded(module.methods["model"], serving, restored.params, limit)
    serve_text = text_signature(serving, model)
    outputs = serve_text.get_concrete_function().structured_outputs
    signatures = {SIGNATURE_TEXT: serve_text, SIGNATURE_IDS: ids_signature(serving, model)}
    # Both signatures are ours (orbax's own would call the model unguarded): the manager
    # saves the module's variables and them.
    with destination.staging(out_dir) as staging:
        ExportManager(module, []).save(staging, signature_overrides=signatures)
    return {
        "out_dir": out_dir,
        "step": restored.step,
        "texts": serving.texts,
        "outputs": sorted(outputs),
        "length": serving.length,
    }


def text_signature(serving, model) -> tf.types.experimental.PolymorphicFunction:
    """serving_default: the texts through the task's preprocess, its sequences cut to the
    batch's bucket (the shortest of bucket_lengths(length, BUCKETS) that holds every
    row), the converted model, the task's postprocess."""
    lengths = tf.constant(bucket_lengths(serving.length, BUCKETS), tf.int32)
    sequences = [name for name, shape in serving.inputs.items() if _dims(shape)[1:2] == ["l"]]
    specs = {name: tf.TensorSpec([None], tf.string, name=name) for name in serving.texts}

    @tf.function(input_signature=[specs])
    def serve_text(texts):
        features = serving.preprocess(texts)
        used = tf.reduce_max(tf.reduce_sum(tf.cast(features["input_mask"], tf.int32), axis=1))
        bucket = tf.minimum(tf.searchsorted(lengths, [used])[0], len(lengths) - 1)
        width = lengths[bucket]
        inputs = {
            name: features[name][:, :width] if name in sequences else features[name]
            for name in serving.inputs
        }
        return serving.postprocess(model(inputs), features)

    return serve_text


def ids_signature(serving, model) -> tf.types.experimental.PolymorphicFunction:
    """serve_ids: the model's inputs (int32, shaped as serving.inputs), the converted
    model, the task's postprocess without features."""
    specs = {
        name: tf.TensorSpec(static_shape(shape), tf.int32, name=name)
        for name, shape in serving.inputs.items()
    }

    @tf.function(input_signature=[specs])
    def serve_ids(inputs):
        return serving.postprocess(model(inputs), None)

    return serve_ids


def guarded(model, serving, params, limit: int):
    """`model` (the converted forward), answering a request with a dimension of 0 (every
    letter of serving.inputs but the sequence length `l`) with empty outputs.

    There the model runs on the request grown by one row of zeros (one element) along
    each empty dimension, and its outputs are cut back to the request's dimensions: an
    output is the model's own, empty where it follows an empty dimension, whatever the
    task (a tagger's word_splits, sized by the texts, passes through as it came).
    """
    where = {}  # each letter -> (an input it sizes, its axis)
    for name, shape in serving.inputs.items():
        for axis, dim in enumerate(_dims(shape)):
            if not dim.isdigit():
                where.setdefault(dim, (name, axis))
    # The outputs' shapes in the inputs' letters: jax.export's symbolic dimensions.
    args = {
        name: jax.ShapeDtypeStruct([1] * len(_dims(shape)), "int32")
        for name, shape in serving.inputs.items()
    }
    specs = jax.export.symbolic_args_specs(
        args, dict(serving.inputs), constraints=(f"l <= {limit}",)
    )
    shapes = jax.tree.leaves(jax.eval_shape(serving.forward, params, specs))
    for shape in shapes:
        for dim in shape.shape:
            if not isinstance(dim, int) and str(dim) not in where:
                raise ValueError(f"an output of shape {shape.shape}: {dim} is no input's dimension")

    def call(inputs: dict):
        sizes = {dim: tf.shape(inputs[name])[axis] for dim, (name, axis) in where.items()}
        empty = tf.reduce_any([size == 0 for dim, size in sizes.items() if dim != "l"])

        def on_padding():
            grown = {
                name: tf.pad(x, [[0, tf.cast(n == 0, tf.int32)] for n in tf.unstack(tf.shape(x))])
                for name, x in inputs.items()
            }
            outputs = model(grown)
            cut = [
                tf.slice(x, [0] * len(shape.shape),
                         [-1 if isinstance(dim, int) else sizes[str(dim)] for dim in shape.shape])
                for x, shape in zip(tf.nest.flatten(outputs), shapes, strict=True)
            ]  # fmt: skip
            return tf.nest.pack_sequence_as(outputs, cut)

        return tf.cond(empty, on_padding, lambda: model(inputs))

    return call


def _dims(polymorphic: str) -> list[str]:
    return [dim.strip() for dim in polymorphic.strip("()").split(",") if dim.strip()]


def static_shape(polymorphic: str) -> list[int | None]:
    """ "(b, 128)" -> [None, 128]: TensorFlow's shape of a jax2tf polymorphic shape."""
    return [int(dim) if dim.isdigit() else None for dim in _dims(polymorphic)]


def _check(workdir: str, out_dir: str):
    """The workdir's Task, after every check that loads no checkpoint: OUT new or empty,
    a task that serves, a tokenizer that runs in TensorFlow ops."""
    destination.check_empty(out_dir)
    kind, _ = workdir_lib.read_task(workdir)
    task = tasks.get(kind, where=f"{workdir}: task")
    if task.serving is None:
        raise ConversionError(
            f"{workdir}: a {kind} workdir has no SavedModel export yet (export --format hf)"
        )
    vocab_file = workdir_lib.require_vocab_file(workdir, what="WORKDIR")
    if load_vocab(vocab_file).kind == "bpe":
        raise ConversionError(
            f"{vocab_file}: a byte-level BPE tokenizer runs in Python (Hugging Face "
            "tokenizers), not in TensorFlow ops, so it cannot go in a SavedModel graph; "
            "export --format hf instead"
        )
    return task


def with_length(restored, length: int):
    """`restored` reading at most `length` tokens a text (an embedder: its pooling's)."""
    limit = restored.config.max_position_embeddings
    if not 3 <= length <= limit:
        raise ConversionError(
            f"--max_seq_length={length}: from 3 ([CLS] text [SEP]) to the model's {limit} positions"
        )
    embedding = restored.task.embedding
    if embedding is not None:
        embedding = {**embedding, "max_seq_length": length}
    task = dataclasses.replace(restored.task, embedding=embedding)
    return dataclasses.replace(restored, max_seq_length=length, task=task)
