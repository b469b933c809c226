"""The retrieval task's `config.data` (RetrievalConfig), checked when built: what an
experiment config starts from, with no TensorFlow imported, so that a config file loads,
and a wrong option is refused, in a fraction of a second. The data itself is read by
retrieval_input.py."""

import dataclasses
import os
from typing import Any

import ml_collections

from data_pipeline import config as config_lib
from data_pipeline.config import FILE_FORMATS, fail, task_config


@dataclasses.dataclass(frozen=True)
class RetrievalConfig:
    # A BEIR-layout directory (local or gs://), or the files below.
    beir_dir: str = ""
    train_split: str = "train"  # qrels/<train_split>.tsv; "" trains nothing
    eval_split: str = "dev"  # qrels/<eval_split>.tsv; "" evaluates nothing
    train_file: str = ""
    eval_file: str = ""
    # The files' columns: the query, its relevant passage, and hard negatives.
    anchor: str = "anchor"
    positive: str = "positive"
    negatives: tuple[str, ...] = ()
    max_query_length: int = 64
    max_seq_length: int = 256  # of passages
    # How many lengths a batch's texts are padded to (bucket_lengths); 1: always the maximum.
    length_buckets: int = 3

    def __post_init__(self):
        if bool(self.beir_dir) == bool(self.train_file or self.eval_file):
            fail("beir_dir", self.beir_dir, "give beir_dir, or train_file and/or eval_file")
        for option in ("train_file", "eval_file"):
            path = getattr(self, option)
            if path and os.path.splitext(path)[1].lower() not in FILE_FORMATS:
                fail(option, path, f"the extension must be one of {', '.join(FILE_FORMATS)}")
        if self.beir_dir and not (self.train_split or self.eval_split):
            fail("train_split", "", "beir_dir needs train_split, eval_split or both")
        columns = [self.anchor, self.positive, *self.negatives]
        if not all(columns):
            fail("negatives" if all(columns[:2]) else "anchor", columns, "must name columns")
        if len(set(columns)) != len(columns):
            fail("negatives", self.negatives, "each column once: anchor, positive, negatives")
        for option in ("max_query_length", "max_seq_length"):
            if getattr(self, option) < 3:
                fail(option, getattr(self, option), "must be at least 3 ([CLS] text [SEP])")
        if self.length_buckets < 1:
            fail("length_buckets", self.length_buckets, "must be at least 1")


def default_config() -> ml_collections.ConfigDict:
    return config_lib.config_dict(RetrievalConfig)


def from_config(data_config: Any) -> RetrievalConfig:
    return task_config(RetrievalConfig, data_config)
