"""bertjax: BERT pretraining and fine-tuning in JAX/Flax."""

__version__ = "0.1.0"
