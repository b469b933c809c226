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
    from orbax.export import ExportManager, JaxModule, ServingConfig

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
    id_specs = {
        name: tf.TensorSpec(static_shape(shape), tf.int32, name=name)
        for name, shape in serving.inputs.items()
    }
    manager = ExportManager(
        module,
        [
            ServingConfig(
                SIGNATURE_IDS,
                input_signature=[id_specs],
                tf_postprocessor=lambda outputs: serving.postprocess(outputs, None),
                method_key="model",
            )
        ],
    )
    serve_text = text_signature(serving, module.methods["model"])
    outputs = serve_text.get_concrete_function().structured_outputs
    with destination.staging(out_dir) as staging:
        manager.save(staging, signature_overrides={SIGNATURE_TEXT: serve_text})
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
