"""bertjax: BERT pretraining and fine-tuning in JAX/Flax.

The notebook API (bertjax/inference.py and the task modules): `restore`, `fill_mask`, `encode`,
`embed`, `next_sentence`, `attention_maps`, and for fine-tuned workdirs
`classify`, `tag`, `answer`, `rerank`. They load on first use: `import bertjax` imports
neither jax nor TensorFlow and changes no environment variable.

That first use also keeps TensorFlow's, XLA's and libtpu's start-up lines off
stderr, in a script as in a Jupyter kernel's cells (bertjax/program.py's `notebook`),
as the tools do; BERTJAX_VERBOSE=1 (or TF_CPP_MIN_LOG_LEVEL=0) keeps them.
"""

__version__ = "0.1.0"

# name -> the module that defines it; a task's notebook function lives with the task.
_API = {
    "restore": "inference",
    "fill_mask": "tasks.pretraining_report",
    "encode": "inference",
    "embed": "inference",
    "next_sentence": "inference",
    "attention_maps": "inference",
    "classify": "tasks.classification",
    "tag": "tasks.tagging",
    "answer": "tasks.squad",
    "rerank": "tasks.reranking",
}
__all__ = list(_API)


def __getattr__(name):
    if name in _API:
        import importlib

        from bertjax import program

        program.notebook()  # before jax starts
        return getattr(importlib.import_module(f"bertjax.{_API[name]}"), name)
    raise AttributeError(f"module 'bertjax' has no attribute {name!r}")
