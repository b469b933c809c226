"""ModernBERT-large pretraining, phase 1: Warner et al. (2024)'s recipe at sequence length 1,024.

    python -m bertjax.main --config experiments/pretrain/modernbert_large.py \
        --workdir gs://YOUR_BUCKET/runs/modernbert_large --distributed

Hardware: a Cloud TPU v5p-128 slice (64 chips, `--distributed`): 77 of the 4,928
sequences of 1,024 tokens a chip, in 7 microbatches of 11 (4,928 = 64 x 77 splits no
other way). `python -m bertjax.tpu.aot --config experiments/pretrain/modernbert_large.py
--topology v5p-8 --config.train_batch_size=128 --noeval` puts 32 a chip at 81.8 GiB. The
original trained on 8 H100 GPUs (paper, Table 3: 3,363 GPU-hours for this phase).

Time: not measured on a TPU; docs/modern-encoders.md has what the TPU compiler
estimates.

Expected result: GLUE dev average 90.4 for the released ModernBERT-large after all
three phases (paper, Table 1).

The recipe is modernbert_base.py's at large's shapes (paper, Table 4: 28 layers, hidden
1,024, 16 heads, GeGLU expansion 5,248) with a 2-billion-token warmup to 5e-4 and a
batch of 4,928. The original's large run plateaued at 5e-4 and was rolled back after
900 billion tokens and restarted at 5e-5 (weight decay 1e-6) for the remaining 800
billion (paper, section 2.2.2); this config trains at 5e-4 and leaves that call to
whoever watches the loss: a run resumed with `--config.optimizer.learning_rate=5e-5`
is refused as another config, so restart from a checkpoint with `init_checkpoint`.
The original also initialised large from base's weights by tiling them (paper,
section 2.2.2); this config starts from bertjax's initialisation.
"""

import ml_collections

from experiments.pretrain import modernbert_base

BATCH_SIZE = 4928
WARMUP_TOKENS = 2_000_000_000
PEAK_LEARNING_RATE = 5e-4


def set_large(config: ml_collections.ConfigDict) -> None:
    """ModernBERT-large's shapes (paper, Table 4)."""
    config.model.preset = "large"
    config.model.num_hidden_layers = 28
    config.model.intermediate_size = 2624


def get_config() -> ml_collections.ConfigDict:
    config = modernbert_base.get_config()
    set_large(config)
    steps = modernbert_base.steps
    length = modernbert_base.SEQUENCE_LENGTH
    config.train_batch_size = BATCH_SIZE
    config.num_train_steps = steps(modernbert_base.TOKENS, BATCH_SIZE, length)
    config.optimizer.learning_rate = PEAK_LEARNING_RATE
    config.optimizer.warmup_steps = steps(WARMUP_TOKENS, BATCH_SIZE, length)
    config.optimizer.weight_decay = modernbert_base.PAPER_WEIGHT_DECAY / PEAK_LEARNING_RATE
    config.optimizer.num_microbatches = 7
    return config
