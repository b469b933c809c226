"""bertjax's host input pipeline: tf.data and NumPy only, never jax."""
