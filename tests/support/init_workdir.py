"""A pretraining workdir's description without a checkpoint: what a fine-tuning setup reads
of its init_checkpoint (model config, vocabulary, task.json), for tests that build a
setup without training anything."""

import pathlib

from bertjax import workdir as workdir_lib
from bertjax.model import BertConfig
from bertjax.tasks import pretraining
from experiments.pretrain import tiny_cpu

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def model_config(words) -> BertConfig:
    """L=1, H=16, A=2, I=32, and a vocabulary of the specials and `words`."""
    return BertConfig(
        num_hidden_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=len(SPECIALS) + len(words),
        max_position_embeddings=64,
    )


def write(root: pathlib.Path, words) -> str:
    """Writes the description under `root` (vocabulary: the specials, then `words`)."""
    vocab = root / "v.txt"
    vocab.write_text("".join(t + "\n" for t in [*SPECIALS, *words]))
    config = tiny_cpu.get_config()
    workdir_lib.write_run_description(
        str(root / "w"),
        config,
        model_config(words),
        str(vocab),
        kind="pretraining",
        description=pretraining.describe(config.data).to_json(),
    )
    return str(root / "w")
