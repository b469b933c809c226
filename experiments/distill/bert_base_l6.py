"""A 6-layer student of a pretrained BERT-Base, distilled with masked LM (DistilBERT's recipe).

    python -m bertjax.convert shrink gs://YOUR_BUCKET/runs/bert_base_phase2 \
        gs://YOUR_BUCKET/runs/bert_base_l6_init --layers 0,2,4,6,8,10
    python -m bertjax.main --config experiments/distill/bert_base_l6.py \
        --workdir gs://YOUR_BUCKET/runs/bert_base_l6 --distributed

The student is BERT-Base with 6 of its 12 layers, started from every other layer of the
teacher (Sanh et al., 2019, arXiv:1910.01108, section 3), and trained on phase 1's data at
length 128 with the teacher's masked-LM distributions softened by a temperature of 2 and
the MLM loss on the true tokens, weighted 1 and 1 (DistilBERT weighs its soft targets
5, the true tokens 2 and a cosine loss on the hidden states 1; there is no hidden-state
loss here). The teacher runs in the same step on the same chips, its parameters sharded
as the student's. experiments/pretrain/bert_base.py describes the data, the vocabulary
and the paths to override (every YOUR_BUCKET); the teacher must use the same
vocabulary.

Hardware: a Cloud TPU v5p-8 or larger; `python -m bertjax.tpu.aot --config
experiments/distill/bert_base_l6.py --topology v5p-8
--config.distill.teacher=experiments/pretrain/bert_base_phase2.py` compiles the step,
the teacher's forward pass inside, on any host (docs/cloud-tpu.md has the row).
Expected result: not run here. DistilBERT keeps 97% of BERT-Base's GLUE score with this
shape; docs/distillation.md has the figures measured on this machine at BERT-Tiny's size.
"""

import ml_collections

from experiments.pretrain import bert_base


def get_config() -> ml_collections.ConfigDict:
    config = bert_base.get_config()
    config.model.num_hidden_layers = 6
    # DistilBERT trained for about 90 hours on 8 V100s; a tenth of phase 1's steps here.
    config.num_train_steps = 90_000
    config.eval_every_steps = 10_000
    config.checkpoint_every_steps = 10_000
    config.init_checkpoint = "gs://YOUR_BUCKET/runs/bert_base_l6_init"
    config.distill = ml_collections.ConfigDict(
        {
            "teacher": "gs://YOUR_BUCKET/runs/bert_base_phase2",
            "temperature": 2.0,
            "weight": 1.0,
            "mlm_weight": 1.0,
        }
    )
    return config
