r"""Shows what the model will see: decoded pretraining examples and batch statistics.

    python -m data_pipeline.inspect_batches --config experiments/pretrain/tiny_cpu.py \
        [--split eval] [--num_batches N] [--dump FILE.jsonl] [--config.data.KEY=VALUE ...]
"""

from absl import flags
from ml_collections import config_flags

from data_pipeline import cli


def define_flags() -> None:
    config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
    flags.DEFINE_enum("split", "train", ["train", "eval"], "Which split to read.")
    flags.DEFINE_integer("num_batches", 10, "Batches to read (eval stops at its end).")
    flags.DEFINE_integer("batch_size", 32, "Sequences per batch.")
    flags.DEFINE_integer("num_examples", 3, "Decoded examples to print.")
    flags.DEFINE_string("dump", None, "Write every example read as one JSON line here.")
    flags.mark_flag_as_required("config")


def run() -> None:
    cli.run("data_pipeline.batch_inspection:main", define_flags)


if __name__ == "__main__":
    run()
