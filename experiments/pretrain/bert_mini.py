"""BERT-Mini (L=4, H=256, A=4; Turc et al.) pretrained with BERT-Base's phase-1 recipe.

    python -m bertjax.main --config experiments/pretrain/bert_mini.py \
        --workdir gs://YOUR_BUCKET/runs/bert_mini

Hardware: one host: a Cloud TPU v4-8 (4 chips), or one GPU with bfloat16
(A100, H100). The device count must divide the batch of 256; add
`--distributed` on a multi-host slice.

Time: not measured with bertjax. A lower bound from compute: 0.79 TFLOP per step
(bertjax.bench.throughput's analytic matmul count, 5% of Base's), 7.1e17 for
900,000 steps, is 11 minutes at a v4-8's
peak (4 chips x 275 bf16 TFLOP/s); a model this small reaches a low fraction of
peak and the host pipeline may set the pace (`python -m data_pipeline.benchmark`),
so expect many times that.

Expected result: Turc et al. report a GLUE test score of 65.8 for their
BERT-Mini, the yardstick for this model after GLUE fine-tuning. It is the
official GLUE score, which includes WNLI; the paper's 79.6 for BERT-Base leaves
WNLI out, so the two are close, not identical, yardsticks
(docs/reference.md#published-numbers). Turc et al.'s pretraining recipe is not
recorded there; this one is bert_base.py's (batch 256, 900,000 steps at length 128, Wikipedia
only), so expect to land near that score, not on it. Not yet reproduced.

Everything but the model size is bert_base.py's, which documents the data and
the paths to override; bert_small.py shows how to run a phase 2 for a compact
preset.
"""

from experiments.pretrain import bert_base


def get_config():
    config = bert_base.get_config()
    config.model.preset = "mini"
    return config
