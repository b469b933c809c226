"""A one-layer BERT-Tiny distilled from `make demo`'s two-layer model on the built-in corpus.

    make demo
    python -m bertjax.main --config experiments/distill/tiny_mlm.py --workdir runs/tiny_student

The student reads the teacher's vocabulary (demo_out/vocab.txt) and learns, at each
masked position, the teacher's distribution (temperature 1, bertjax/losses.py's
mlm_distillation_sums) in place of the true token (mlm_weight 0); NSP as usual.
Everything else is tiny_cpu.py's, for a tenth of its steps. At a temperature of 2 with
the true tokens beside, DistilBERT's mix, this short a run learns less than without the
teacher: docs/distillation.md.
Hardware: a 2-core CPU, about a minute.
Expected result: docs/distillation.md has the held-out MLM accuracy against the same
student trained without the teacher.
"""

import ml_collections

from experiments.pretrain import tiny_cpu


def get_config() -> ml_collections.ConfigDict:
    config = tiny_cpu.get_config()
    config.num_train_steps = 300
    config.eval_every_steps = 300
    config.checkpoint_every_steps = 300
    config.log_every_steps = 50
    config.optimizer.warmup_steps = 30
    config.data.vocab_file = "demo_out/vocab.txt"
    config.model.num_hidden_layers = 1
    config.distill = ml_collections.ConfigDict(
        {"teacher": "demo_out", "temperature": 1.0, "weight": 1.0, "mlm_weight": 0.0}
    )
    return config
