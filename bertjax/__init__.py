"""bertjax: BERT pretraining and fine-tuning in JAX/Flax.

The notebook API (bertjax/inference.py): `restore`, `fill_mask`, `encode`,
`embed`, `next_sentence`, `attention_maps`, and for fine-tuned workdirs
`classify`, `tag`, `answer`. They load on first use, so
`import bertjax` stays cheap and does not start jax.
"""

__version__ = "0.1.0"

_INFERENCE = (
    "restore",
    "fill_mask",
    "encode",
    "embed",
    "next_sentence",
    "attention_maps",
    "classify",
    "tag",
    "answer",
)
__all__ = list(_INFERENCE)


def __getattr__(name):
    if name in _INFERENCE:
        from bertjax import inference

        return getattr(inference, name)
    raise AttributeError(f"module 'bertjax' has no attribute {name!r}")
