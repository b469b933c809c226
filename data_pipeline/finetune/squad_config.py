"""The SQuAD task's `config.data` (SquadConfig), checked when built: what an experiment
config starts from, with no TensorFlow imported, so that a config file loads, and a wrong
option is refused, in a fraction of a second. The data itself is read by squad_input.py."""

import dataclasses
from typing import Any

import ml_collections

from data_pipeline import config as config_lib
from data_pipeline.config import fail, task_config

SOURCES = ("files", "tfds")


@dataclasses.dataclass(frozen=True)
class SquadConfig:
    """run_squad.py's defaults."""

    # 'files' (the official JSON) or 'tfds'.
    source: str = "files"
    # source='files': official SQuAD JSON files
    train_file: str = ""
    eval_file: str = ""
    # source='tfds'
    tfds_name: str = "squad/v1.1"
    tfds_data_dir: str = ""  # "" is the TFDS default
    train_split: str = "train"
    eval_split: str = "validation"
    # both
    # SQuAD 2.0: a question may have no answer; the model may then answer "".
    version_2_with_negative: bool = False
    max_seq_length: int = 384
    doc_stride: int = 128  # windows over long contexts start this many tokens apart
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    # SQuAD 2.0: answer "" when the null score beats the best span's by more than this.
    null_score_diff_threshold: float = 0.0
    # Several windows per row of max_seq_length (data_pipeline/packing.py): the same
    # windows, losses and answers in fewer rows. Off by default: windows are long (the
    # built-in cloze task's fill 69% of a row, and packing it gained nothing, 0.98x).
    pack_examples: bool = False

    def __post_init__(self):
        if self.source not in SOURCES:
            fail("source", self.source, f"must be one of {', '.join(SOURCES)}")
        if self.max_query_length < 1:
            fail("max_query_length", self.max_query_length, "must be at least 1")
        room = self.max_seq_length - self.max_query_length - 3
        if room < 1:
            fail(
                "max_query_length",
                self.max_query_length,
                f"max_query_length + 3 >= max_seq_length={self.max_seq_length}: a full-length "
                "query leaves no room for the document in [CLS] query [SEP] document [SEP]",
            )
        if not 1 <= self.doc_stride <= room:
            fail(
                "doc_stride",
                self.doc_stride,
                f"must be in [1, max_seq_length - max_query_length - 3 = {room}]; "
                "a longer stride would skip document tokens",
            )
        if self.n_best_size < 1:
            fail("n_best_size", self.n_best_size, "must be at least 1")
        if self.max_answer_length < 1:
            fail("max_answer_length", self.max_answer_length, "must be at least 1")


def default_config() -> ml_collections.ConfigDict:
    """Every SquadConfig field at its default (SQuAD 1.1): what experiment configs start from."""
    return config_lib.config_dict(SquadConfig)


def from_config(data_config: Any) -> SquadConfig:
    """A SquadConfig from a ConfigDict, a dict or itself; unknown keys fail."""
    return task_config(SquadConfig, data_config)
