"""ModernBERT-base, phases 2 and 3: context extension to 8,192 tokens, then the decay.

    python -m bertjax.main --config experiments/pretrain/modernbert_base_phase2.py \
        --workdir gs://YOUR_BUCKET/runs/modernbert_base_phase2 --distributed

Hardware: as phase 1 (experiments/pretrain/modernbert_base.py), a v5p-128: 576 rows of
8,192 tokens (the same tokens per step as phase 1's 4,608 of 1,024), 9 a chip in 3
microbatches of 3; `bertjax.tpu.aot` puts 8 a chip at 83.9 GiB.

Time: not measured on a TPU (the original: 290 + 60 H100-hours, paper Table 3).

Expected result: the released ModernBERT-base, GLUE dev average 88.4 after fine-tuning
(paper, Table 1).

The recipe (paper, sections 2.1.2 and 2.2): phase 1's parameters (init_checkpoint),
length 8,192, the global layers' RoPE base raised to 160,000 (local layers keep
10,000), 250 billion tokens at a constant 3e-4 without warmup, then 50 billion tokens
of 1-sqrt decay. bertjax runs phases 2 and 3 as one warmup-stable-decay schedule whose
last 50 billion tokens decay; the original also changed the data mix for the decay
(more of its higher-quality sources), which this config leaves to `data`.
"""

import ml_collections

from experiments.pretrain import modernbert_base

SEQUENCE_LENGTH = 8192
BATCH_SIZE = 576
TOKENS = 250_000_000_000 + 50_000_000_000
DECAY_TOKENS = 50_000_000_000
LEARNING_RATE = 3e-4


def extend(
    config: ml_collections.ConfigDict, batch_size: int, learning_rate: float, microbatches: int
) -> None:
    """Phase 1's config as phases 2 and 3 (shared with modernbert_large_phase2.py)."""
    config.train_batch_size = batch_size
    config.eval_batch_size = 64
    steps = modernbert_base.steps
    config.num_train_steps = steps(TOKENS, batch_size, SEQUENCE_LENGTH)
    config.data.max_seq_length = SEQUENCE_LENGTH
    # 30% of 8,192 is 2,457 positions; a multiple of 64 above it.
    config.data.max_predictions_per_seq = 2496
    config.model.rope_theta = 160_000.0
    config.optimizer.learning_rate = learning_rate
    config.optimizer.warmup_steps = 0
    config.optimizer.decay_steps = steps(DECAY_TOKENS, batch_size, SEQUENCE_LENGTH)
    config.optimizer.num_microbatches = microbatches


def get_config() -> ml_collections.ConfigDict:
    config = modernbert_base.get_config()
    config.init_checkpoint = "gs://YOUR_BUCKET/runs/modernbert_base"
    extend(config, BATCH_SIZE, LEARNING_RATE, microbatches=3)
    # The paper's 1e-5 per step at the phase's own peak (see modernbert_base.py).
    config.optimizer.weight_decay = modernbert_base.PAPER_WEIGHT_DECAY / LEARNING_RATE
    return config
