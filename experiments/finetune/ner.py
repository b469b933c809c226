"""Named-entity tagging (CoNLL-2003 style): a label per word, on its first word piece.

    python -m bertjax.main --config experiments/finetune/ner.py --workdir runs/ner \
        --config.init_checkpoint=runs/bert_base_converted \
        --config.data.train_file=eng.train --config.data.eval_file=eng.testa

or from TFDS (prepared elsewhere): --config.data.source=tfds (conll2003, IOB2 tags).
The original CoNLL-2003 files tag in IOB1: add --config.data.tagging_scheme=iob1.

Hardware and time: BERT-Base on one GPU or TPU chip; 3 epochs of CoNLL-2003's
14k training sentences are about 1,300 steps at batch 32 (not timed with bertjax).
Expected result: the paper's fine-tuned BERT-Base (Table 7) scores entity-level
F1 96.4 on the CoNLL-2003 dev set and 92.4 on test (Large: 96.6 and 92.8),
averaged over 5 restarts. Those runs used a cased model and fed each sentence with
the maximal document context the data provides (§5.3); this config tags one
sentence per example, without document context, so expect lower scores; a cased
checkpoint matches the paper's input (docs/reference.md#ner).
"""

import ml_collections

from data_pipeline.finetune import tagging_config
from experiments.finetune import base


def get_config() -> ml_collections.ConfigDict:
    config = base.get_config()
    config.task = "tagging"
    config.data = tagging_config.default_config()
    config.optimizer.learning_rate = 5e-5
    return config
