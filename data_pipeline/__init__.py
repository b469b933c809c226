"""bertjax's host input pipeline: tf.data and NumPy only, never jax.

The entry point is `make_pretraining_dataset`; the batch schema is in schema.py.
"""

__all__ = ["make_pretraining_dataset"]


def __getattr__(name):
    # Imported on first use, so light modules (instances, masking, config) load
    # without TensorFlow.
    if name == "make_pretraining_dataset":
        from data_pipeline.pretraining_input import make_pretraining_dataset

        return make_pretraining_dataset
    raise AttributeError(f"module 'data_pipeline' has no attribute {name!r}")
