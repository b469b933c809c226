"""Learns a vocabulary from an experiment config's training split (data_pipeline/vocab_learning.py).

python -m data_pipeline.build_vocab --config experiments/pretrain/tiny_cpu.py --output vocab.txt
"""

from absl import flags
from ml_collections import config_flags

from data_pipeline import cli


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Experiment config file; its `data` field is used.", lock_config=True
    )
    flags.mark_flag_as_required("config")
    flags.DEFINE_string(
        "output",
        None,
        "Where to write the vocabulary: vocab.txt for WordPiece; for SentencePiece the .model "
        "path ('.model' is appended when missing; a .vocab listing is written beside it); "
        "tokenizer.json for BPE.",
        required=True,
    )
    flags.DEFINE_integer("vocab_size", None, "Entries to learn; default config.data.vocab_size.")
    flags.DEFINE_enum("model_type", "unigram", ["unigram", "bpe"], "SentencePiece model type.")
    flags.DEFINE_integer("sample_sentences", 2000, "Held-out sentences tokenized for the summary.")


def run() -> None:
    cli.run("data_pipeline.vocab_learning:main", define_flags)


if __name__ == "__main__":
    run()
