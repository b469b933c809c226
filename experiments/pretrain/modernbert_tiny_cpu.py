"""A tiny modern encoder: ModernBERT's block and recipe at BERT-Tiny's width, on a laptop CPU.

    python -m bertjax.main --config experiments/pretrain/modernbert_tiny_cpu.py \
        --workdir runs/modernbert_tiny

Hardware: any CPU. On the 2-core test machine about 2.2 steps a second, so about 23
minutes for the 3,000 steps (`python -m bertjax.bench.encoders` trains it 1,401 steps,
BERT-Tiny's 3,000 steps' FLOPs, in 10.6 minutes).

Expected result: at BERT-Tiny's training FLOPs (experiments/pretrain/tiny_cpu.py, 3,000
steps), held-out MLM accuracy at 15% masking 0.371 against BERT-Tiny's 0.143, measured
by `python -m bertjax.bench.encoders --workdir runs/encoders` (docs/modern-encoders.md).

ModernBERT's block (experiments/pretrain/modernbert_base.py: pre-LayerNorm, no biases,
GeGLU, rotary embeddings, a global layer every third and sliding windows in the
others: 128 tokens there, 64 here for rows of 128) and objective (masked LM alone at 30%, scored at 15%, packed rows),
StableAdamW under a warmup-stable-decay schedule, on tiny_cpu.py's built-in corpus.
The tokenizer stays tiny_cpu's learned WordPiece so that the two models' MLM accuracies
are over the same tokens; `--config.data.tokenizer=bpe` learns a byte-level BPE instead,
as ModernBERT's.
"""

import ml_collections

from experiments.pretrain import modernbert_base, tiny_cpu


def get_config() -> ml_collections.ConfigDict:
    config = tiny_cpu.get_config()
    modernbert_base.set_modern_objective(config.data)
    # 30% of 128 tokens is 38 positions.
    config.data.max_predictions_per_seq = 40
    config.data.max_sequences_per_row = 4
    model = config.model
    modernbert_base.set_modern_block(model)
    # BERT-Tiny's width (hidden 128, 2 heads); GeGLU's three matrices of 256 hold about
    # what BERT's two of 512 do, spread over 4 layers (0 and 3 global).
    model.num_hidden_layers = 4
    model.intermediate_size = 256
    model.local_attention_window = 64
    model.max_position_embeddings = 512
    optimizer = config.optimizer
    optimizer.name = "stable_adamw"
    optimizer.schedule = "warmup_stable_decay"
    optimizer.decay_shape = "1-sqrt"
    # Both follow num_train_steps when it is overridden: warmup over the first 1/30
    # (tiny_cpu's 100 of 3,000), the 1-sqrt decay over the last fifth.
    steps = config.get_ref("num_train_steps")
    optimizer.warmup_steps = steps // 30
    optimizer.decay_steps = steps // 5
    optimizer.b2 = 0.98
    optimizer.max_grad_norm = 0.0
    return config
