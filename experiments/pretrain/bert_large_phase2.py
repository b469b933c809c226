"""BERT-Large pretraining, phase 2: 100,000 steps at sequence length 512 from phase 1.

    python -m bertjax.main --config experiments/pretrain/bert_large_phase2.py \
        --workdir gs://YOUR_BUCKET/runs/bert_large_phase2 --distributed \
        --config.init_checkpoint=gs://YOUR_BUCKET/runs/bert_large

Hardware: as phase 1 (experiments/pretrain/bert_large.py), a Cloud TPU v4-128
slice (64 chips, 16 hosts), the paper's 64 TPU chips.

Time: not measured on a TPU. The paper's 4 days on 64 TPU chips (Appendix
A.2) cover both phases. `python -m bertjax.tpu.aot --config
experiments/pretrain/bert_large_phase2.py --topology v5p-8 --noeval` prints the
step's FLOPs, memory per chip and roofline time on a slice; docs/cloud-tpu.md, "Will it
fit?", lists what it printed. A bound: real steps also wait on collectives and
the host.

Memory: at 64 rows of 512 per chip (a v4-8) or 32 (a v5e-8) the step does
not fit in a v4 or v5e chip as written; add `--config.model.remat_policy=full`
(activations recomputed in the backward pass) or
`--config.optimizer.num_microbatches=N` (docs/cloud-tpu.md, "Will it fit?", has the
figures). The v4-128 above puts 4 sequences on a chip.

Expected result (docs/reference.md#published-numbers; not yet reproduced with bertjax, and
this config trains on Wikipedia only): masked-LM accuracy >= 0.720 on held-out
sequences of length 512 (MLPerf's BERT-Large target) and, after fine-tuning,
SQuAD 1.1 dev F1 90.9.

The schedule, the fresh optimizer state, the 1,000-step warmup and packing are
those of experiments/pretrain/bert_base_phase2.py, which explains them.
"""

from experiments.pretrain import bert_base_phase2, bert_large


def get_config():
    return bert_base_phase2.phase2(
        bert_large.get_config(), init_checkpoint="gs://YOUR_BUCKET/runs/bert_large"
    )
