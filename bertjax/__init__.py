"""bertjax: BERT pretraining and fine-tuning in JAX/Flax.

The notebook API (bertjax/inference.py and the task modules): `restore`, `fill_mask`, `encode`,
`embed`, `next_sentence`, `attention_maps`, and for fine-tuned workdirs
`classify`, `tag`, `answer`. They load on first use, so
`import bertjax` stays cheap and does not start jax.
"""

from bertjax import tpu as _tpu

__version__ = "0.1.0"
_tpu.libtpu_without_tpu()

# name -> the module that defines it; a task's notebook function lives with the task.
_API = {
    "restore": "inference",
    "fill_mask": "inference",
    "encode": "inference",
    "embed": "inference",
    "next_sentence": "inference",
    "attention_maps": "inference",
    "classify": "classification",
    "tag": "tagging",
    "answer": "squad",
}
__all__ = list(_API)


def __getattr__(name):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(f"bertjax.{_API[name]}"), name)
    raise AttributeError(f"module 'bertjax' has no attribute {name!r}")
