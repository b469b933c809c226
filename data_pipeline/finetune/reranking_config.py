"""The reranking task's `config.data` (RerankingConfig), checked when built: what an
experiment config starts from, with no TensorFlow imported, so that a config file loads,
and a wrong option is refused, in a fraction of a second.

A cross-encoder trains on groups: a query, one relevant passage and `num_negatives`
passages that are not. Two sources:

    beir_dir         a BEIR-layout directory (retrieval_input.py reads its layout): each
    negatives_file   query of train_split with a relevant passage, and its negatives from
                     negatives_file, JSON lines {"query_id": ..., "negatives": [passage
                     ids, best ranked first]} as an embedder ranked them. The eval_split's
                     queries are reranked among their judged passages and the negatives
                     eval_negatives_file gives them.
    train_file       TSV, CSV or JSONL rows of named columns: `query`, `positive` and the
    eval_file        `negatives` columns, each a text (a group per row); or, with
                     `passage` set, (query, passage, label) rows, a pair each, for the
                     pointwise loss.
"""

import dataclasses
import os
from typing import Any

import ml_collections

from data_pipeline import config as config_lib
from data_pipeline.config import FILE_FORMATS, fail, task_config


@dataclasses.dataclass(frozen=True)
class RerankingConfig:
    # A BEIR-layout directory (local or gs://) and the negatives of its queries.
    beir_dir: str = ""
    negatives_file: str = ""  # train_split's queries (JSON lines)
    eval_negatives_file: str = ""  # eval_split's; "": their judged passages alone
    train_split: str = "train"  # qrels/<train_split>.tsv; "" trains nothing
    eval_split: str = "dev"  # qrels/<eval_split>.tsv; "" evaluates nothing
    num_negatives: int = 7  # per group read from negatives_file, the first ranked first
    # Or files of rows.
    train_file: str = ""
    eval_file: str = ""
    query: str = "query"
    positive: str = "positive"
    negatives: tuple[str, ...] = ()  # columns of hard negatives
    passage: str = ""  # set: rows are (query, passage, label) pairs
    label: str = "label"  # of a pair: 1 relevant, 0 not (or a grade in [0, 1])
    # A pair is read as [CLS] query [SEP] passage [SEP], the query cut to
    # max_query_length tokens and the whole to max_seq_length.
    max_query_length: int = 64
    max_seq_length: int = 256
    # How many lengths a batch's pairs are padded to (records.bucket_lengths).
    length_buckets: int = 3

    def __post_init__(self):
        files = self.train_file or self.eval_file
        if bool(self.beir_dir) == bool(files):
            fail("beir_dir", self.beir_dir, "give beir_dir, or train_file and/or eval_file")
        for option in ("train_file", "eval_file"):
            path = getattr(self, option)
            if path and os.path.splitext(path)[1].lower() not in FILE_FORMATS:
                fail(option, path, f"the extension must be one of {', '.join(FILE_FORMATS)}")
        for option in ("negatives_file", "eval_negatives_file"):
            path = getattr(self, option)
            if path and not self.beir_dir:
                fail(option, path, "negatives by passage id need beir_dir's collection")
            if path and os.path.splitext(path)[1].lower() != ".jsonl":
                fail(option, path, "JSON lines of query_id and negatives (.jsonl)")
        if self.beir_dir and not (self.train_split or self.eval_split):
            fail("train_split", "", "beir_dir needs train_split, eval_split or both")
        if self.beir_dir and self.train_split and not self.negatives_file:
            fail(
                "negatives_file",
                "",
                f"a group of train_split={self.train_split!r} needs negatives: a .jsonl "
                "file of each query's passage ids that are not relevant",
            )
        if self.num_negatives < 1:
            fail("num_negatives", self.num_negatives, "must be at least 1")
        self._check_columns()
        if self.max_query_length < 1:
            fail("max_query_length", self.max_query_length, "must be at least 1")
        if self.max_seq_length < self.max_query_length + 4:
            fail(
                "max_seq_length",
                self.max_seq_length,
                f"must hold [CLS] query [SEP] passage [SEP] with max_query_length="
                f"{self.max_query_length}: at least {self.max_query_length + 4}",
            )
        if self.length_buckets < 1:
            fail("length_buckets", self.length_buckets, "must be at least 1")

    def _check_columns(self) -> None:
        if self.passage and self.negatives:
            fail("negatives", self.negatives, "rows are pairs when passage is set: no negatives")
        named = ("query", "passage", "label") if self.passage else ("query", "positive")
        columns = [(option, getattr(self, option)) for option in named]
        columns += [("negatives", name) for name in self.negatives]
        for option, name in columns:
            if not name:
                fail(option, getattr(self, option), "must name a column")
        names = [name for _, name in columns]
        if len(set(names)) != len(names):
            fail(named[0], self.query, f"each column once: {', '.join(names)}")

    @property
    def pairs(self) -> bool:
        """Rows of (query, passage, label): one pair a group, for the pointwise loss."""
        return bool(self.passage)

    @property
    def group_size(self) -> int:
        """The candidates of a training group: its positive and its negatives."""
        if self.pairs:
            return 1
        return 1 + (self.num_negatives if self.beir_dir else len(self.negatives))


def default_config() -> ml_collections.ConfigDict:
    return config_lib.config_dict(RerankingConfig)


def from_config(data_config: Any) -> RerankingConfig:
    return task_config(RerankingConfig, data_config)
