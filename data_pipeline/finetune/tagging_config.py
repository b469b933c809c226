"""The tagging task's `config.data` (TaggingConfig), checked when built: what an
experiment config starts from, with no TensorFlow imported, so that a config file loads,
and a wrong option is refused, in a fraction of a second. The data itself is read by
tagging_input.py."""

import dataclasses
from typing import Any

import ml_collections

from data_pipeline import config as config_lib
from data_pipeline.config import fail, task_config

SOURCES = ("files", "tfds")
# How tags spell entities, for entity-level scoring (bertjax/tasks/scores.py reads them).
TAGGING_SCHEMES = ("iob1", "iob2", "iobes", "bilou")


@dataclasses.dataclass(frozen=True)
class TaggingConfig:
    # 'files' (CoNLL format) or 'tfds'.
    source: str = "files"
    # source='tfds'
    tfds_name: str = "conll2003"
    tfds_data_dir: str = ""  # "" is the TFDS default
    tfds_words_feature: str = "tokens"
    tfds_tags_feature: str = "ner"
    train_split: str = "train"
    eval_split: str = "dev"
    # source='files'
    train_file: str = ""
    eval_file: str = ""
    tag_column: int = -1  # an index into a line's columns; the word is column 0
    label_names: tuple[str, ...] = ()  # () reads them from train_file (sorted)
    # both
    tagging_scheme: str = "iob2"  # how tags spell entities: one of TAGGING_SCHEMES
    max_seq_length: int = 128
    # Several short windows per row of max_seq_length (data_pipeline/packing.py): the
    # same windows, losses and scores in fewer rows.
    pack_examples: bool = True

    def __post_init__(self):
        if self.source not in SOURCES:
            fail("source", self.source, f"must be one of {', '.join(SOURCES)}")
        if self.tagging_scheme not in TAGGING_SCHEMES:
            fail(
                "tagging_scheme",
                self.tagging_scheme,
                f"must be one of {', '.join(TAGGING_SCHEMES)}",
            )
        if self.max_seq_length < 3:
            fail("max_seq_length", self.max_seq_length, "must be at least 3 ([CLS] word [SEP])")
        if self.source == "tfds":
            if not self.tfds_name:
                fail("tfds_name", self.tfds_name, "source='tfds' needs a dataset name")
            if self.label_names:
                fail("label_names", self.label_names, "source='tfds' takes the ClassLabel names")
            return
        if not self.train_file and not self.eval_file:
            fail(
                "train_file", self.train_file, "source='files' needs train_file, eval_file or both"
            )
        if self.tag_column == 0:
            fail("tag_column", self.tag_column, "column 0 holds the word")
        if not self.train_file and not self.label_names:
            fail("label_names", self.label_names, "without train_file the label set must be given")
        if len(set(self.label_names)) != len(self.label_names):
            fail("label_names", self.label_names, "has duplicates")


def default_config() -> ml_collections.ConfigDict:
    """Every TaggingConfig field at its default: what experiment configs start from."""
    return config_lib.config_dict(TaggingConfig)


def from_config(data_config: Any) -> TaggingConfig:
    """A TaggingConfig from a ConfigDict, a dict or itself; unknown keys fail."""
    return task_config(TaggingConfig, data_config)
