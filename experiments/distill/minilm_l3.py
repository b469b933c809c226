"""all-MiniLM-L6-v2 distilled into a 3-layer embedder of its layers 0, 2 and 4.

    make minilm
    python -m bertjax.convert shrink runs/minilm runs/minilm_l3 --layers 0,2,4
    python -m bertjax.main --config experiments/distill/minilm_l3.py --workdir runs/student \
        --config.init_checkpoint=runs/minilm_l3 --config.distill.teacher=runs/minilm \
        --config.data.beir_dir=builtin_tasks/retrieval

The student starts from half of the teacher's layers and learns, for each training
query, the teacher's distribution over the batch's passages (`kl`: softmax of 20 times
the cosines), beside the in-batch negatives' loss on the collection's own pairs. The
teacher embeds each batch in the same step. The collection, lengths, batch (32 pairs)
and epoch are experiments/finetune/builtin_retrieval.py's, the learning rate 1e-4; every
option is the retrieval task's (experiments/finetune/retrieval.py).
Expected result: test nDCG@10 0.2519 against the teacher's 0.3079 (82%); a student
that keeps the last layer (--layers 1,3,5) reaches 0.2742 (89%). docs/distillation.md
has the figures and the settings tried.
Hardware: a 2-core CPU, a few minutes an epoch on the built-in collection.
"""

import ml_collections

from experiments.finetune import builtin_retrieval


def get_config() -> ml_collections.ConfigDict:
    # builtin_retrieval.py's collection, lengths, batch and epoch.
    config = builtin_retrieval.get_config()
    config.optimizer.learning_rate = 1e-4
    config.loss.name = "kl"
    config.loss.distill_weight = 1.0
    config.loss.in_batch_weight = 1.0
    return config
