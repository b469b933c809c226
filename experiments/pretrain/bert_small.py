"""BERT-Small (L=4, H=512, A=8; Turc et al.) pretrained with BERT-Base's phase-1 recipe.

    python -m bertjax.main --config experiments/pretrain/bert_small.py \
        --workdir gs://YOUR_BUCKET/runs/bert_small

Hardware: one host: a Cloud TPU v4-8 (4 chips), or one GPU with bfloat16
(A100, H100). The device count must divide the batch of 256; add
`--distributed` on a multi-host slice.

Time: not measured with bertjax. A lower bound from compute: 2.61 TFLOP per step
(bertjax.bench.throughput's analytic matmul count, 15% of Base's), 2.3e18 for 900,000
steps, is 36 minutes at a v4-8's peak (4 chips x 275 bf16 TFLOP/s); a model
this small reaches a lower fraction of peak than Base, so expect many times
that. `python -m bertjax.bench.throughput --config experiments/pretrain/bert_small.py`
measures a step.

Expected result: Turc et al. report a GLUE test score of 71.2 for their
BERT-Small, the yardstick for this model after GLUE fine-tuning. It is the
official GLUE score, which includes WNLI; the paper's 79.6 for BERT-Base leaves
WNLI out, so the two are close, not identical, yardsticks
(docs/reference.md#published-numbers). Turc et al.'s pretraining recipe is not
recorded there; this one is bert_base.py's (batch 256, 900,000 steps at length 128, Wikipedia
only), so expect to land near that score, not on it. Not yet reproduced.

Everything but the model size is bert_base.py's, which documents the data and
the paths to override. Positions beyond 128 stay untrained; for longer inputs,
run phase 2 with the same preset:
`python -m bertjax.main --config experiments/pretrain/bert_base_phase2.py
--config.model.preset=small --config.init_checkpoint=gs://YOUR_BUCKET/runs/bert_small
--workdir gs://YOUR_BUCKET/runs/bert_small_phase2`.
"""

from experiments.pretrain import bert_base


def get_config():
    config = bert_base.get_config()
    config.model.preset = "small"
    return config
