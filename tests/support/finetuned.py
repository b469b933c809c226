"""Fine-tuned workdirs of every task without fine-tuning: all-MiniLM-L6-v2's encoder
(its real weights and the bert-base-uncased vocabulary) under a random head, saved with
the description a fine-tuning run writes. What the export tests export."""

import os

import jax
import numpy as np
from flax import linen as nn

import bertjax
from bertjax import checkpoint
from bertjax import workdir as workdir_lib
from bertjax.model import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertjax.tasks.contract import Description
from experiments.pretrain import tiny_cpu

# case -> (our head, its labels, the transformers Auto class that loads it).
HEADS = {
    "classification": (
        BertForSequenceClassification,
        ("negative", "positive"),
        "AutoModelForSequenceClassification",
    ),
    "regression": (BertForSequenceClassification, (), "AutoModelForSequenceClassification"),
    "tagging": (
        BertForTokenClassification,
        ("B-PER", "I-PER", "O"),
        "AutoModelForTokenClassification",
    ),
    "squad": (BertForQuestionAnswering, (), "AutoModelForQuestionAnswering"),
    # A reranker's parameters are a one-label classifier's (model.BertForReranking).
    "reranking": (BertForSequenceClassification, (), "AutoModelForSequenceClassification"),
}


# The classifiers are of pairs, as their columns say (SavedModel: text_pair); the reader
# windows its contexts at the workdir's length.
DATA = {
    "classification": {"text_a": "sentence1", "text_b": "sentence2"},
    "squad": {"max_seq_length": 128, "doc_stride": 32},
    "reranking": {"max_query_length": 16, "max_seq_length": 128},
}


def finetuned_workdir(minilm_workdir, root, case: str) -> str:
    """A `case` workdir (HEADS) at step 3: MiniLM's encoder, a random head, and the run's
    description; its tokenizer keeps words up to 200 characters, as bertjax's own runs do."""
    head, labels, _ = HEADS[case]
    kind = "classification" if case == "regression" else case
    num_labels = 1 if case in ("regression", "reranking") else len(labels)
    pretrained = bertjax.restore(str(minilm_workdir))
    tokenizer_data = {**pretrained.task.tokenizer_data, "max_chars_per_word": 200}
    workdir = os.path.join(root, case)
    workdir_lib.write_run_description(
        workdir,
        tiny_cpu.get_config(),
        pretrained.config,
        workdir_lib.vocab_file(str(minilm_workdir)),
        kind=kind,
        description=Description(
            max_seq_length=128,
            tokenizer_data=tokenizer_data,
            num_labels=num_labels,
            label_names=labels,
            data=DATA.get(kind, {}),
        ).to_json(),
    )
    model = head(pretrained.config) if head is BertForQuestionAnswering else None
    model = model or head(pretrained.config, num_labels)
    ids = np.zeros((1, 4), np.int32)
    shapes = jax.eval_shape(
        lambda: nn.unbox(model.init(jax.random.key(0), ids, ids, ids, deterministic=True))
    )["params"]
    rng = np.random.default_rng(7)
    params = jax.tree.map(lambda x: rng.normal(0.0, 0.5, x.shape).astype(x.dtype), shapes)
    params["bert"] = pretrained.params["bert"]
    with checkpoint.make_manager(workdir, max_to_keep=1) as manager:
        checkpoint.save(manager, 3, {"params": params}, data={})
    return workdir
