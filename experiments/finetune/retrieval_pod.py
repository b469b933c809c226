r"""Embedding fine-tuning at pod scale: `retrieval_pod.py:bert_base` or
`retrieval_pod.py:modernbert_base`, 16,384 pairs a step, every one a negative of every
other query.

    python -m bertjax.tpu.aot --config experiments/finetune/retrieval_pod.py:bert_base \
        --topology v5p-64 --config.init_checkpoint=experiments/pretrain/bert_base_phase2.py
    python -m bertjax.tpu.launch run --name embedder --zone ZONE --accelerator_type v5p-64 \
        --config experiments/finetune/retrieval_pod.py:bert_base --workdir gs://YOUR_BUCKET/runs/embedder \
        --config.init_checkpoint=gs://YOUR_BUCKET/runs/bert_base_phase2 \
        --config.data.train_file=gs://YOUR_BUCKET/pairs/train.jsonl \
        --config.data.eval_file=gs://YOUR_BUCKET/pairs/dev.jsonl

The first command compiles the step for the slice on any host, before the pretrained
model exists (its init checkpoint named by the pretraining config that will write it)
and without the pairs: docs/cloud-tpu.md, "Will it fit?", lists what it printed.

Why large batches: the loss (bertjax/losses.py, in-batch negatives) scores each query
against every passage of the global batch, on every host, so a step of 16,384 pairs
gives each query 16,383 negatives. The whole batch's vectors are 16,384 x 768 floats a
side (50 MB); what does not fit is the activations of 16,384 encodings at once. The
step therefore encodes the batch in `optimizer.num_microbatches` pieces without
gradients, takes the loss and its gradient with respect to the vectors over the whole
batch, then encodes each piece again and pulls that gradient back through it (GradCache,
Gao et al., 2021, arXiv:2101.06983; bertjax/train.py, cached_gradients): the gradient of
the whole batch's loss at the memory of one piece, for a third more compute.

Data: pair files (anchor, positive; `--config.data.negatives=COLUMN` adds hard negatives)
or a BEIR directory (`--config.data.beir_dir`). At this batch an epoch of MS MARCO's
half a million training queries is about 30 steps: batches this large are for
collections of millions of pairs, such as weakly supervised title-body or
question-answer pairs.

Hardware: a Cloud TPU v5p-64 slice (32 chips, 8 hosts): 512 pairs per chip, 64 at a
time. Time and expected result: not measured on a TPU. The learning rate, warmup and
lengths are our choice, not a published recipe.
"""

import ml_collections

from data_pipeline.errors import ConfigError
from experiments.finetune import retrieval

# The pretraining config each variant fine-tunes the run of (phase 2: its positions).
PRETRAINED = {
    "bert_base": "experiments/pretrain/bert_base_phase2.py",
    "modernbert_base": "experiments/pretrain/modernbert_base_phase2.py",
}


def get_config(variant: str = "bert_base") -> ml_collections.ConfigDict:
    if variant not in PRETRAINED:
        raise ConfigError(
            f"retrieval_pod.py:{variant}: the variant must be one of {', '.join(PRETRAINED)}"
        )
    config = retrieval.get_config()
    config.platform = "tpu"
    config.init_checkpoint = f"gs://YOUR_BUCKET/runs/{variant}_phase2"
    config.data.train_file = "gs://YOUR_BUCKET/pairs/train.jsonl"
    config.data.eval_file = "gs://YOUR_BUCKET/pairs/dev.jsonl"
    config.data.max_query_length = 64
    config.data.max_seq_length = 256
    config.train_batch_size = 16384
    config.eval_batch_size = 4096
    config.optimizer.num_microbatches = 8
    config.optimizer.learning_rate = 1e-4
    config.model.dtype = "bfloat16"
    config.log_every_steps = 10
    return config
