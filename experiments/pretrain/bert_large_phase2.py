"""BERT-Large pretraining, phase 2: 100,000 steps at sequence length 512 from phase 1.

    python -m bertjax.main --config experiments/pretrain/bert_large_phase2.py \
        --workdir gs://YOUR_BUCKET/runs/bert_large_phase2 --distributed \
        --config.init_checkpoint=gs://YOUR_BUCKET/runs/bert_large

Hardware: as phase 1 (experiments/pretrain/bert_large.py), a Cloud TPU v4-128
slice (64 chips, 16 hosts), the paper's 64 TPU chips.

Time: not measured with bertjax. The paper's 4 days on 64 TPU chips (Appendix
A.2) cover both phases. 261 TFLOP per step by bertjax.benchmark's analytic
count, 4.2x a phase-1 step, 2.6e19 in all: 25 minutes at a v4-128's peak (64
chips x 275 bf16 TFLOP/s), a lower bound only.

Expected result (docs/reference.md#published-numbers; not yet reproduced with bertjax, and
this config trains on Wikipedia only): masked-LM accuracy >= 0.720 on held-out
sequences of length 512 (MLPerf's BERT-Large target) and, after fine-tuning,
SQuAD 1.1 dev F1 90.9.

The schedule, the fresh optimizer state and the 1,000-step warmup are those of
experiments/pretrain/bert_base_phase2.py, which explains them.
"""

from experiments.pretrain import bert_base_phase2, bert_large


def get_config():
    return bert_base_phase2.phase2(
        bert_large.get_config(), init_checkpoint="gs://YOUR_BUCKET/runs/bert_large"
    )
