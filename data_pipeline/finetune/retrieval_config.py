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

# config.data.texts: the collection's own texts, not a file.
COLLECTION = "collection"
# A texts file: a text per line, or a "text" column of a TSV, CSV or JSONL file.
TEXTS_FORMATS = (".txt", *FILE_FORMATS)


@dataclasses.dataclass(frozen=True)
class RetrievalConfig:
    # A BEIR-layout directory (local or gs://), or the files below.
    beir_dir: str = ""
    train_split: str = "train"  # qrels/<train_split>.tsv; "" trains nothing
    eval_split: str = "dev"  # qrels/<eval_split>.tsv; "" evaluates nothing
    # Hard negatives of train_split's queries: `python -m bertjax.retrieval mine`'s file
    # (mined.py), num_negatives of each query's line beside each of its pairs.
    negatives_file: str = ""
    num_negatives: int = 1
    train_file: str = ""
    eval_file: str = ""
    # The files' columns: the query, its relevant passage, and hard negatives.
    anchor: str = "anchor"
    positive: str = "positive"
    negatives: tuple[str, ...] = ()
    # A teacher's margin for each negatives column (its score of the positive less its
    # score of that negative), which the Margin-MSE loss reads.
    margins: tuple[str, ...] = ()
    # Texts without pairs, which only the distillation loss 'mse' reads: "collection"
    # (beir_dir's passages and train_split's queries) or a file of texts (TEXTS_FORMATS).
    # They replace the training pairs, two to a row, each cut to max_seq_length.
    texts: str = ""
    max_query_length: int = 64
    max_seq_length: int = 256  # of passages
    # How many lengths a batch's texts are padded to (bucket_lengths); 1: always the maximum.
    length_buckets: int = 3

    def __post_init__(self):
        files = self.train_file or self.eval_file
        if (self.beir_dir and files) or not (self.beir_dir or files or self.texts):
            fail("beir_dir", self.beir_dir, "give beir_dir, or train_file and/or eval_file")
        self._check_texts()
        for option in ("train_file", "eval_file"):
            path = getattr(self, option)
            if path and os.path.splitext(path)[1].lower() not in FILE_FORMATS:
                fail(option, path, f"the extension must be one of {', '.join(FILE_FORMATS)}")
        if self.beir_dir and not (self.train_split or self.eval_split):
            fail("train_split", "", "beir_dir needs train_split, eval_split or both")
        if self.negatives_file:
            if not (self.beir_dir and self.train_split):
                fail(
                    "negatives_file", self.negatives_file,
                    "negatives by passage id need beir_dir's collection and its train_split",
                )  # fmt: skip
            if os.path.splitext(self.negatives_file)[1].lower() != ".jsonl":
                fail("negatives_file", self.negatives_file, "the mining tool's JSON lines (.jsonl)")
        if self.num_negatives < 1:
            fail("num_negatives", self.num_negatives, "must be at least 1")
        columns = [self.anchor, self.positive, *self.negatives, *self.margins]
        if not all(columns):
            fail("negatives" if all(columns[:2]) else "anchor", columns, "must name columns")
        if len(set(columns)) != len(columns):
            fail(
                "negatives", self.negatives,
                "each column once: anchor, positive, negatives, margins",
            )  # fmt: skip
        if self.margins and len(self.margins) != len(self.negatives):
            fail(
                "margins", self.margins,
                f"one column per negatives column ({len(self.negatives)}): the teacher's "
                "margin of the positive over that negative",
            )  # fmt: skip
        for option in ("max_query_length", "max_seq_length"):
            if getattr(self, option) < 3:
                fail(option, getattr(self, option), "must be at least 3 ([CLS] text [SEP])")
        if self.length_buckets < 1:
            fail("length_buckets", self.length_buckets, "must be at least 1")

    def _check_texts(self):
        if not self.texts:
            return
        if self.texts == COLLECTION and not (self.beir_dir and self.train_split):
            fail("texts", self.texts, "the collection's texts need beir_dir and its train_split")
        extension = os.path.splitext(self.texts)[1].lower()
        if self.texts != COLLECTION and extension not in TEXTS_FORMATS:
            fail(
                "texts", self.texts,
                f"'{COLLECTION}' or a file of texts: {', '.join(TEXTS_FORMATS)}",
            )  # fmt: skip
        pairs = ("train_file", "negatives_file", "negatives", "margins")
        for option in pairs:
            if getattr(self, option):
                fail(
                    option, getattr(self, option),
                    f"texts ({self.texts!r}) replace the training pairs: drop {option}",
                )  # fmt: skip

    @property
    def train_query_length(self) -> int:
        """What a training row's query slot is cut to: a query's length, or, with texts,
        a passage's (texts fill both slots)."""
        return self.max_seq_length if self.texts else self.max_query_length

    @property
    def passages_per_row(self) -> int:
        return passages_per_row(dataclasses.asdict(self))


def passages_per_row(data: dict) -> int:
    """A training row's passages, of a config.data as a dict (a workdir's task.json
    holds one): its positive, then its hard negatives."""
    if data.get("negatives_file"):
        return 1 + data.get("num_negatives", 1)
    return 1 + len(data.get("negatives") or ())


def default_config() -> ml_collections.ConfigDict:
    return config_lib.config_dict(RetrievalConfig)


def from_config(data_config: Any) -> RetrievalConfig:
    return task_config(RetrievalConfig, data_config)
