"""ModernBERT-base pretraining, phase 1: Warner et al. (2024)'s recipe at sequence length 1,024.

    python -m bertjax.main --config experiments/pretrain/modernbert_base.py \
        --workdir gs://YOUR_BUCKET/runs/modernbert_base --distributed

Hardware: a Cloud TPU v5p-128 slice (64 chips, `--distributed`): 72 of the 4,608
sequences of 1,024 tokens a chip, in 2 microbatches of 36. `python -m bertjax.tpu.aot
--config experiments/pretrain/modernbert_base.py --topology v5p-8
--config.train_batch_size=256 --noeval` puts 64 a chip (one microbatch) at 84.3 of a
v5p chip's 95 GiB. The original trained on 8 H100 GPUs (paper, Table 3: 1,529 GPU-hours
for this phase).

Time: not measured on a TPU; docs/modern-encoders.md has what the TPU compiler
estimates.

Expected result: the paper publishes no MLM figure, only the fine-tuned model's: GLUE
dev average 88.4 for ModernBERT-base after all three phases (paper, Table 1; this is
phase 1, experiments/pretrain/modernbert_base_phase2.py the other two).

The recipe (paper, section 2.2 and Appendix A; docs/modern-encoders.md): masked LM
only at 30% masking (evaluated at 15%), packed rows, 1.719 trillion tokens at length
1,024 with RoPE base 10,000 in every layer, StableAdamW at 8e-4 after a 3-billion-token
warmup, held (the warmup-stable-decay schedule's decay comes in phase 2), weight decay
1e-5 per step, betas (0.9, 0.98), no gradient clipping.

Differences from the original, by design or for lack of the data:
- The batch is 4,608 sequences from the first step; the original grew it from 768 over
  the first 50 billion tokens (bertjax has no batch-size schedule).
- Dropout: the original drops the attention output at 0.1 and nothing else; bertjax's
  hidden_dropout_prob would drop embeddings and feed-forward outputs too, so it is 0 here.
- Data: the original's 2-trillion-token mix of web text, code and scientific articles
  is not public as one dataset. This config reads a TFDS corpus you name; the paths
  below are placeholders.

Paths to override (every YOUR_BUCKET):
- `data.vocab_file`: ModernBERT's tokenizer.json (a byte-level BPE of 50,368 entries,
  from the released answerdotai/ModernBERT-base), or learn one: `data.vocab_file=''`.
- `data.tfds_name`, `data.tfds_data_dir`: the corpus.
"""

import ml_collections

from experiments.pretrain import tiny_cpu

# Paper, section 2.2 and Table 3: tokens per phase, batch and rates.
SEQUENCE_LENGTH = 1024
BATCH_SIZE = 4608
TOKENS = 1_719_000_000_000
WARMUP_TOKENS = 3_000_000_000
PEAK_LEARNING_RATE = 8e-4
# Decoupled from the rate in the original (p -= wd * p * lr / peak); optax's AdamW
# multiplies weight_decay by the rate, so the paper's 1e-5 becomes 1e-5 / peak.
PAPER_WEIGHT_DECAY = 1e-5


def steps(tokens: int, batch_size: int, length: int) -> int:
    return round(tokens / (batch_size * length))


def set_modern_block(model: ml_collections.ConfigDict) -> None:
    """ModernBERT's block on any size (paper, section 2.1; docs/modern-encoders.md)."""
    model.norm_placement = "pre"
    model.use_bias = False
    model.feed_forward = "geglu"
    model.hidden_act = "gelu"
    model.position_embedding = "rotary"
    # Phase 1 at length 1,024: base 10,000 in every layer; phase 2 raises the global one.
    model.rope_theta = 10_000.0
    model.local_rope_theta = 10_000.0
    model.global_attention_every = 3
    model.local_attention_window = 128
    model.type_vocab_size = 0
    model.pooler = "norm"
    model.scale_output_init = True
    model.layer_norm_eps = 1e-5
    model.hidden_dropout_prob = 0.0
    model.attention_probs_dropout_prob = 0.0


def set_modern_objective(data: ml_collections.ConfigDict) -> None:
    """Masked LM alone at 30%, scored at 15%, on packed rows (paper, section 2.2)."""
    data.next_sentence_prediction = False
    data.masked_lm_prob = 0.3
    data.eval_masked_lm_prob = 0.15
    data.pack_examples = True


def get_config() -> ml_collections.ConfigDict:
    config = tiny_cpu.get_config()
    config.platform = "tpu"
    config.train_batch_size = BATCH_SIZE
    config.eval_batch_size = 512
    config.num_train_steps = steps(TOKENS, BATCH_SIZE, SEQUENCE_LENGTH)
    config.num_eval_steps = 20
    config.eval_every_steps = 5_000
    config.checkpoint_every_steps = 2_000

    data = config.data
    data.source = "tfds"
    data.tfds_name = "YOUR_CORPUS"
    data.tfds_data_dir = "gs://YOUR_BUCKET/tensorflow_datasets"
    data.eval_fraction = 0.001
    data.tokenizer = "bpe"
    data.vocab_file = "gs://YOUR_BUCKET/modernbert/tokenizer.json"
    data.vocab_size = 50368
    data.do_lower_case = False
    data.max_seq_length = SEQUENCE_LENGTH
    # 30% of 1,024 is 307 positions; a multiple of 64 above it.
    data.max_predictions_per_seq = 320
    data.max_sequences_per_row = 8
    data.document_buffer_size = 10_000
    data.shuffle_buffer_size = 50_000
    data.num_workers = 4
    set_modern_objective(data)

    config.model = tiny_cpu.get_model_config("base", data.get_ref("vocab_size"))
    model = config.model
    set_modern_block(model)
    model.num_hidden_layers = 22
    model.intermediate_size = 1152
    model.max_position_embeddings = 8192
    model.dtype = "bfloat16"
    model.attention_implementation = "splash"
    model.scan_layers = True

    optimizer = config.optimizer
    optimizer.name = "stable_adamw"
    optimizer.learning_rate = PEAK_LEARNING_RATE
    optimizer.warmup_steps = steps(WARMUP_TOKENS, BATCH_SIZE, SEQUENCE_LENGTH)
    optimizer.schedule = "warmup_stable_decay"
    optimizer.decay_steps = 0
    optimizer.decay_shape = "1-sqrt"
    optimizer.b1 = 0.9
    optimizer.b2 = 0.98
    optimizer.eps = 1e-6
    optimizer.weight_decay = PAPER_WEIGHT_DECAY / PEAK_LEARNING_RATE
    # StableAdamW's update clipping stands in for gradient clipping (the original has none).
    optimizer.max_grad_norm = 0.0
    # 72 rows a chip on a v5p-128 would need about 95 GiB at once (docstring).
    optimizer.num_microbatches = 2
    return config
