r"""A reranker at pod scale: `reranking_pod.py:bert_base` or `reranking_pod.py:modernbert_base`,
4,096 groups a step, each a query, its relevant passage and 7 hard negatives (32,768 pairs).

    python -m bertjax.tpu.aot --config experiments/finetune/reranking_pod.py:bert_base \
        --topology v5p-64 --config.init_checkpoint=experiments/pretrain/bert_base_phase2.py
    python -m bertjax.tpu.launch run --name reranker --zone ZONE --accelerator_type v5p-64 \
        --config experiments/finetune/reranking_pod.py:bert_base \
        --workdir gs://YOUR_BUCKET/runs/reranker \
        --config.init_checkpoint=gs://YOUR_BUCKET/runs/bert_base_phase2 \
        --config.data.beir_dir=gs://YOUR_BUCKET/msmarco \
        --config.data.negatives_file=gs://YOUR_BUCKET/msmarco/negatives_train.jsonl \
        --config.data.eval_negatives_file=gs://YOUR_BUCKET/msmarco/negatives_dev.jsonl

The first command compiles the step for the slice on any host, before the pretrained
model exists (its init checkpoint named by the pretraining config that will write it)
and without the data (placeholder groups of the same shape): docs/cloud-tpu.md, "Will
it fit?", lists what it printed. The negatives come from `python -m bertjax.retrieval
mine` with an embedder (docs/reranking.md).

Each group stays on one chip (model.BertForReranking reads a row's 8 pairs side by
side), so the listwise losses need no communication; the loss divides by the whole
batch's pairs, groups or ordered pairs (losses.reranking_weight), so the 4 microbatches
(gradient accumulation) give the gradient of the whole batch.

Hardware: a Cloud TPU v5p-64 slice (32 chips, 8 hosts): 128 groups (1,024 pairs) per
chip, a quarter at a time. Time and expected result: not measured on a TPU. The
learning rate, warmup and lengths are our choice, not a published recipe.
"""

import ml_collections

from data_pipeline.errors import ConfigError
from experiments.finetune import reranking

# The pretraining config each variant fine-tunes the run of (phase 2: its positions).
PRETRAINED = {
    "bert_base": "experiments/pretrain/bert_base_phase2.py",
    "modernbert_base": "experiments/pretrain/modernbert_base_phase2.py",
}


def get_config(variant: str = "bert_base") -> ml_collections.ConfigDict:
    if variant not in PRETRAINED:
        raise ConfigError(
            f"reranking_pod.py:{variant}: the variant must be one of {', '.join(PRETRAINED)}"
        )
    config = reranking.get_config()
    config.platform = "tpu"
    config.init_checkpoint = f"gs://YOUR_BUCKET/runs/{variant}_phase2"
    config.data.beir_dir = "gs://YOUR_BUCKET/msmarco"
    config.data.negatives_file = "gs://YOUR_BUCKET/msmarco/negatives_train.jsonl"
    config.data.eval_negatives_file = "gs://YOUR_BUCKET/msmarco/negatives_dev.jsonl"
    config.data.num_negatives = 7
    config.data.max_query_length = 64
    config.data.max_seq_length = 256
    config.train_batch_size = 4096
    config.eval_batch_size = 1024
    config.optimizer.num_microbatches = 4
    config.optimizer.learning_rate = 7e-5
    config.model.dtype = "bfloat16"
    config.log_every_steps = 10
    return config
