"""ModernBERT-large, phases 2 and 3: context extension to 8,192 tokens, then the decay.

    python -m bertjax.main --config experiments/pretrain/modernbert_large_phase2.py \
        --workdir gs://YOUR_BUCKET/runs/modernbert_large_phase2 --distributed

Hardware: as phase 1 (experiments/pretrain/modernbert_large.py), a v5p-128: 10 rows of
8,192 tokens a chip in 5 microbatches of 2; `bertjax.tpu.aot` puts 4 a chip at 81.7 GiB.

Time: not measured on a TPU (the original: 601 + 123 H100-hours, paper Table 3).

Expected result: the released ModernBERT-large, GLUE dev average 90.4 after
fine-tuning (paper, Table 1).

The recipe: modernbert_base_phase2.py's (global RoPE base 160,000, 250 billion tokens
held, 50 billion of 1-sqrt decay) at large's rate after its restart, 5e-5 with weight
decay 1e-6 per step (paper, section 2.2.2). The original's batch was 616 rows of
8,192 tokens on 8 GPUs; a slice's chips must split the batch evenly, and 616 = 8 x 77
splits over no TPU slice above 8 chips, so this config takes 640 (5 x 128).
"""

import ml_collections

from experiments.pretrain import modernbert_base_phase2, modernbert_large

BATCH_SIZE = 640
LEARNING_RATE = 5e-5
PAPER_WEIGHT_DECAY = 1e-6


def get_config() -> ml_collections.ConfigDict:
    config = modernbert_large.get_config()
    config.init_checkpoint = "gs://YOUR_BUCKET/runs/modernbert_large"
    modernbert_base_phase2.extend(config, BATCH_SIZE, LEARNING_RATE, microbatches=5)
    config.optimizer.weight_decay = PAPER_WEIGHT_DECAY / LEARNING_RATE
    return config
