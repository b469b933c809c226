"""BERT-Large pretraining, phase 1: the paper's recipe at sequence length 128.

    python -m bertjax.main --config experiments/pretrain/bert_large.py \
        --workdir gs://YOUR_BUCKET/runs/bert_large --distributed

Hardware: a Cloud TPU v4-128 slice (64 chips, 16 hosts), the paper's 64 TPU
chips; a v3-128 (64 chips, 128 cores) works too. The device count must divide
the batch of 256.

Time: not measured on a TPU. The paper trained BERT-Large on 16 Cloud TPUs
(64 TPU chips) in 4 days for all 1,000,000 steps (paper, Appendix A.2); phase 1
is 90% of those steps. `python -m bertjax.tpu.aot --config
experiments/pretrain/bert_large.py --topology v5p-8` prints the step's FLOPs,
memory per chip and roofline time on a slice; docs/cloud-tpu.md, "Will it fit?", lists
what it printed. Bounds: real steps also wait on collectives and the host.

Expected result: the published numbers describe the finished model, after
phase 2 (experiments/pretrain/bert_large_phase2.py): SQuAD 1.1 dev F1 90.9 after
fine-tuning, and MLPerf's BERT-Large target of masked-LM accuracy >= 0.720 on
held-out sequences of length 512 (docs/reference.md#published-numbers). Phase 1 alone
has no published figure. Not yet reproduced with bertjax; this config trains on
Wikipedia only.

Everything else (the data, the paths to override, the offline TFRecords for
Wikipedia + BookCorpus, and how the paper's single schedule is split into two
runs) is as in experiments/pretrain/bert_base.py. The uncased vocabulary of the
Large release is the same 30,522-entry file as Base's.
"""

from experiments.pretrain import bert_base


def get_config():
    config = bert_base.get_config()
    config.model.preset = "large"
    # Still pure data parallelism: parameters, gradients and both Adam moments of
    # Large take about 5.4 GB in float32, which fits on a v4 chip (32 GiB) or a
    # v3 core (16 GiB) next to 2-4 sequences' activations. Sharding them over
    # fsdp (--config.mesh.fsdp=4) saves memory for larger per-device batches
    # at the cost of an all-gather per layer.
    config.mesh.fsdp = 1
    return config
