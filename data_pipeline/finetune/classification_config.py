"""The classification task's `config.data` (ClassificationConfig) and GLUE's tasks, checked
when built: what an experiment config starts from, with no TensorFlow imported, so that a
config file loads, and a wrong option is refused, in a fraction of a second. The data
itself is read by classification_input.py."""

import dataclasses
import os
from typing import Any

import ml_collections

from data_pipeline import config as config_lib
from data_pipeline.config import FILE_FORMATS, fail, task_config

SOURCES = ("files", "glue")
METRICS = ("accuracy", "f1", "matthews_corrcoef", "pearson", "spearman")


@dataclasses.dataclass(frozen=True)
class GlueTask:
    text_a: str
    text_b: str | None
    label_names: tuple[str, ...]  # () for regression
    metrics: tuple[str, ...] = ("accuracy",)
    eval_splits: tuple[str, ...] = ("validation",)  # the first is the default

    @property
    def is_regression(self) -> bool:
        return not self.label_names


# The TFDS glue builder's feature and label names. F1 takes label 1 as positive.
GLUE_TASKS = {
    "cola": GlueTask("sentence", None, ("unacceptable", "acceptable"), ("matthews_corrcoef",)),
    "sst2": GlueTask("sentence", None, ("negative", "positive")),
    "mrpc": GlueTask(
        "sentence1", "sentence2", ("not_equivalent", "equivalent"), ("accuracy", "f1")
    ),
    "stsb": GlueTask("sentence1", "sentence2", (), ("pearson", "spearman")),
    "qqp": GlueTask("question1", "question2", ("not_duplicate", "duplicate"), ("accuracy", "f1")),
    "mnli": GlueTask(
        "premise",
        "hypothesis",
        ("entailment", "neutral", "contradiction"),
        eval_splits=("validation_matched", "validation_mismatched"),
    ),
    "qnli": GlueTask("question", "sentence", ("entailment", "not_entailment")),
    "rte": GlueTask("sentence1", "sentence2", ("entailment", "not_entailment")),
    "wnli": GlueTask("sentence1", "sentence2", ("not_entailment", "entailment")),
}


@dataclasses.dataclass(frozen=True)
class ClassificationConfig:
    # 'files' (below) or 'glue' (TFDS glue/<glue_task>).
    source: str = "files"
    # source='glue'
    glue_task: str = ""  # one of GLUE_TASKS
    # The folder of GLUE's download (CoLA/, SST-2/, ..., MNLI/; local or gs://), read in
    # its own files' layout (glue_files.py); "" reads TFDS glue/<glue_task>.
    glue_dir: str = ""
    tfds_data_dir: str = ""  # "" is the TFDS default
    eval_split: str = ""  # "" is the task's first eval split (TFDS's names)
    # source='files'
    train_file: str = ""
    eval_file: str = ""
    # Column names: the first text, the second ("" for single texts), the label.
    text_a: str = "text_a"
    text_b: str = ""
    label: str = "label"
    # A float label and one output trained with squared error.
    is_regression: bool = False
    label_names: tuple[str, ...] = ()  # () reads them from train_file (sorted)
    # () is accuracy (pearson, spearman for regression); also f1, matthews_corrcoef.
    metrics: tuple[str, ...] = ()
    # both
    max_seq_length: int = 128
    # Several short examples per row of max_seq_length (data_pipeline/packing.py): the
    # same examples, losses and scores in fewer rows.
    pack_examples: bool = True

    def __post_init__(self):
        if self.source not in SOURCES:
            fail("source", self.source, f"must be one of {', '.join(SOURCES)}")
        if self.max_seq_length < 3:
            fail("max_seq_length", self.max_seq_length, "must be at least 3 ([CLS] A [SEP])")
        for metric in self.metrics:
            if metric not in METRICS:
                fail("metrics", self.metrics, f"{metric!r} is not one of {', '.join(METRICS)}")
        if self.source == "glue":
            if self.glue_task not in GLUE_TASKS:
                fail("glue_task", self.glue_task, f"must be one of {', '.join(GLUE_TASKS)}")
            task = GLUE_TASKS[self.glue_task]
            if self.eval_split and self.eval_split not in task.eval_splits:
                fail(
                    "eval_split",
                    self.eval_split,
                    f"glue/{self.glue_task} has {', '.join(task.eval_splits)}",
                )
            if self.label_names or self.metrics:
                option = "label_names" if self.label_names else "metrics"
                fail(option, getattr(self, option), "source='glue' takes it from GLUE_TASKS")
            if self.is_regression and not task.is_regression:
                fail("is_regression", True, f"glue/{self.glue_task} is a classification task")
            return
        if self.glue_dir:
            fail("glue_dir", self.glue_dir, "is for source='glue'")
        if not self.train_file and not self.eval_file:
            fail(
                "train_file", self.train_file, "source='files' needs train_file, eval_file or both"
            )
        for option in ("train_file", "eval_file"):
            path = getattr(self, option)
            if path and os.path.splitext(path)[1].lower() not in FILE_FORMATS:
                fail(option, path, f"the extension must be one of {', '.join(FILE_FORMATS)}")
        if not self.text_a:
            fail("text_a", self.text_a, "must name a column")
        if not self.label:
            fail("label", self.label, "must name a column")
        if self.is_regression:
            if self.label_names:
                fail("label_names", self.label_names, "a regression task has no label names")
            if {"accuracy", "f1", "matthews_corrcoef"} & set(self.metrics):
                fail("metrics", self.metrics, "regression takes pearson and spearman")
            return
        if {"pearson", "spearman"} & set(self.metrics):
            fail("metrics", self.metrics, "pearson and spearman are for is_regression=True")
        if not self.train_file and not self.label_names:
            fail("label_names", self.label_names, "without train_file the label set must be given")
        if self.label_names and len(set(self.label_names)) != len(self.label_names):
            fail("label_names", self.label_names, "has duplicates")
        if self.label_names and len(self.label_names) < 2:
            fail("label_names", self.label_names, "classification needs at least two labels")
        if "f1" in self.metrics and self.label_names and len(self.label_names) != 2:
            fail("metrics", self.metrics, "f1 needs exactly two labels")


def default_config() -> ml_collections.ConfigDict:
    """Every ClassificationConfig field at its default: what experiment configs start from."""
    return config_lib.config_dict(ClassificationConfig)


def from_config(data_config: Any) -> ClassificationConfig:
    """A ClassificationConfig from a ConfigDict, a dict or itself; unknown keys fail."""
    return task_config(ClassificationConfig, data_config)
