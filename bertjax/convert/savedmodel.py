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
- `serve_ids` takes the model's int32 [B, length] inputs, for text tokenized elsewhere,
  and returns the same outputs.

The model is converted once for every platform jax2tf lowers it for (CPU, GPU, TPU), so
the SavedModel serves on any of them. A byte-level BPE tokenizer (ModernBERT's) runs in
Python, not in TensorFlow ops, so its workdirs are refused.
"""

import jax
import tensorflow as tf

from bertjax import inference, tasks
from bertjax import workdir as workdir_lib
from bertjax.convert import destination
from bertjax.convert.errors import ConversionError

SIGNATURE_TEXT = "serving_default"
SIGNATURE_IDS = "serve_ids"
PLATFORMS = ("cpu", "cuda", "tpu")


def export_savedmodel(workdir: str, out_dir: str, step: int | None = None) -> dict:
    """Writes OUT as a SavedModel of WORKDIR's checkpoint `step` (default: the latest);
    returns {'out_dir', 'step', 'texts', 'outputs'}."""
    from orbax.export import ExportManager, JaxModule, ServingConfig

    out_dir = workdir_lib.absolute(out_dir)
    destination.check_empty(out_dir)
    restored = inference.restore(workdir, step)
    task = tasks.get(restored.kind, where=f"{workdir}: task")
    if task.serving is None:
        raise ConversionError(f"{workdir}: a {restored.kind} workdir has no SavedModel export")
    if restored.tokenizer.vocab.kind == "bpe":
        raise ConversionError(
            f"{workdir}: its byte-level BPE tokenizer runs in Python (Hugging Face "
            "tokenizers), not in TensorFlow ops, so it cannot go in a SavedModel graph; "
            "export --format hf instead"
        )
    serving = task.serving(restored)
    shapes = {name: "(b, _)" for name in serving.inputs}
    module = JaxModule(
        jax.device_get(restored.params),
        {"model": serving.forward},
        input_polymorphic_shape={"model": shapes},
        jax2tf_kwargs={"model": {"native_serialization_platforms": PLATFORMS}},
    )
    text_specs = {name: tf.TensorSpec([None], tf.string, name=name) for name in serving.texts}

    @tf.function(input_signature=[text_specs])
    def preprocess(texts):
        inputs = serving.preprocess(texts)
        return {
            name: tf.ensure_shape(inputs[name], [None, serving.length]) for name in serving.inputs
        }

    id_specs = {
        name: tf.TensorSpec([None, serving.length], tf.int32, name=name) for name in serving.inputs
    }
    configs = [
        ServingConfig(
            SIGNATURE_TEXT,
            tf_preprocessor=preprocess,
            tf_postprocessor=serving.postprocess,
            method_key="model",
        ),
        ServingConfig(
            SIGNATURE_IDS,
            input_signature=[id_specs],
            tf_postprocessor=serving.postprocess,
            method_key="model",
        ),
    ]
    with destination.staging(out_dir) as staging:
        ExportManager(module, configs).save(staging)
    outputs = tf.saved_model.load(out_dir).signatures[SIGNATURE_TEXT].structured_outputs
    return {
        "out_dir": out_dir,
        "step": restored.step,
        "texts": serving.texts,
        "outputs": sorted(outputs),
    }
