"""The GLUE benchmark's files as its download lays them out: a folder per task (CoLA/,
SST-2/, MRPC/, STS-B/, QQP/, MNLI/, QNLI/, RTE/, WNLI/ and diagnostic/ for AX), each
with train.tsv, dev.tsv and test.tsv (MNLI: dev_matched.tsv, dev_mismatched.tsv,
test_matched.tsv, test_mismatched.tsv) in the task's own columns.

Every file but CoLA's train and dev has a header; those two hold four columns
(source, label, the author's judgement, sentence). Fields are tab-separated and
never quoted: a `"` is part of the text. The test files carry no labels but an
index column, by which the GLUE server matches predictions to examples. Labels
are read as the files spell them, which is also how the server wants them back
(`Layout.label_values`), in the order of classification_config.GLUE_TASKS'
label names; STS-B's score is a float.

`check_data_dir` fails in one line on the first file a set of tasks needs that
is missing; `read_split` reads one file into a `GlueSplit`. Bad rows are
TaskDataErrors naming the file and line.
"""

import dataclasses
import os

import numpy as np

from data_pipeline import files
from data_pipeline.finetune.records import TaskDataError, read_records

NLI_LABELS = ("entailment", "neutral", "contradiction")


@dataclasses.dataclass(frozen=True)
class Layout:
    folder: str
    text_a: str  # the columns, by their header names
    text_b: str | None
    label: str
    label_values: tuple[str, ...]  # as the files spell them; () for a regression score
    splits: tuple[str, ...] = ("train", "dev", "test")  # each in <split>.tsv
    test_index: str = "index"
    names: tuple[str, ...] = ()  # the columns of the train and dev files, when headerless

    def file(self, data_dir: str, split: str) -> str:
        return os.path.join(data_dir, self.folder, f"{split}.tsv")


LAYOUTS = {
    "cola": Layout(
        "CoLA", "sentence", None, "label", ("0", "1"),
        names=("source", "label", "author_label", "sentence"),
    ),
    "sst2": Layout("SST-2", "sentence", None, "label", ("0", "1")),
    "mrpc": Layout("MRPC", "#1 String", "#2 String", "Quality", ("0", "1")),
    "stsb": Layout("STS-B", "sentence1", "sentence2", "score", ()),
    "qqp": Layout(
        "QQP", "question1", "question2", "is_duplicate", ("0", "1"), test_index="id"
    ),
    "mnli": Layout(
        "MNLI", "sentence1", "sentence2", "gold_label", NLI_LABELS,
        splits=("train", "dev_matched", "dev_mismatched", "test_matched", "test_mismatched"),
    ),
    "qnli": Layout("QNLI", "question", "sentence", "label", ("entailment", "not_entailment")),
    "rte": Layout("RTE", "sentence1", "sentence2", "label", ("entailment", "not_entailment")),
    "wnli": Layout("WNLI", "sentence1", "sentence2", "label", ("0", "1")),
    # The diagnostic set: test examples only, predicted with the MNLI model.
    "ax": Layout("diagnostic", "sentence1", "sentence2", "", NLI_LABELS, splits=("diagnostic",)),
}  # fmt: skip

HOW_TO_GET = (
    "the GLUE download (gluebenchmark.com, download_glue_data.py) lays out one folder a "
    "task; or read TFDS glue/* with --data_dir tfds"
)


@dataclasses.dataclass(frozen=True, eq=False)
class GlueSplit:
    source: str  # the file
    text_a: np.ndarray  # object [N] of str
    text_b: np.ndarray  # object [N] of str; "" for single-sentence tasks
    labels: np.ndarray | None  # int32 [N] (indices into label_values) or float32; test: None
    index: np.ndarray | None  # object [N] of str: a test file's index column; else None

    def __len__(self) -> int:
        return len(self.text_a)


def is_test(task: str, split: str) -> bool:
    return task == "ax" or split.startswith("test")


def check_data_dir(data_dir: str, tasks, splits_of=None) -> None:
    """Fails on the first missing folder or file among the splits (`splits_of(task)`,
    by default all) of `tasks`, naming it and how to get it."""
    if not files.isdir(data_dir):
        raise TaskDataError(f"--data_dir={data_dir}: no such directory; {HOW_TO_GET}")
    for task in tasks:
        layout = _layout(task)
        folder = os.path.join(data_dir, layout.folder)
        if not files.isdir(folder):
            raise TaskDataError(f"{folder}: missing, for the task {task}; {HOW_TO_GET}")
        for split in splits_of(task) if splits_of else layout.splits:
            path = layout.file(data_dir, split)
            if not files.exists(path):
                raise TaskDataError(f"{path}: missing, for the task {task}; {HOW_TO_GET}")


def read_split(data_dir: str, task: str, split: str) -> GlueSplit:
    """One file of a task, as GLUE's download lays it out."""
    layout = _layout(task)
    if split not in layout.splits:
        raise TaskDataError(f"GLUE {task} has no split {split!r}; it has {list(layout.splits)}")
    path = layout.file(data_dir, split)
    test = is_test(task, split)
    columns = [("text_a", layout.text_a)]
    if layout.text_b:
        columns.append(("text_b", layout.text_b))
    columns.append(("index", layout.test_index) if test else ("label", layout.label))
    names = layout.names if layout.names and not test else None
    text_a, text_b, last, lines = [], [], [], []
    for line, values in read_records(path, columns, names=names):
        text_a.append(values[0])
        text_b.append(values[1] if layout.text_b else "")
        last.append(values[-1])
        lines.append(line)
    if not text_a:
        raise TaskDataError(f"{path}: no examples")
    index = labels = None
    if test:
        index = np.array(last, object)
    else:
        labels = _labels(path, layout, lines, last)
    return GlueSplit(path, np.array(text_a, object), np.array(text_b, object), labels, index)


def _layout(task: str) -> Layout:
    if task not in LAYOUTS:
        raise TaskDataError(f"unknown GLUE task {task!r}; the tasks: {', '.join(LAYOUTS)}")
    return LAYOUTS[task]


def _labels(path: str, layout: Layout, lines: list[int], values: list[str]) -> np.ndarray:
    if not layout.label_values:
        scores = []
        for line, value in zip(lines, values, strict=True):
            try:
                scores.append(float(value))
            except ValueError:
                raise TaskDataError(
                    f"{path}: line {line}: the {layout.label} {value!r} is not a number"
                ) from None
        return np.array(scores, np.float32)
    ids = {value: i for i, value in enumerate(layout.label_values)}
    labels = np.empty(len(values), np.int32)
    for i, (line, value) in enumerate(zip(lines, values, strict=True)):
        if value not in ids:
            raise TaskDataError(
                f"{path}: line {line}: the {layout.label} {value!r} is none of "
                f"{list(layout.label_values)}"
            )
        labels[i] = ids[value]
    return labels
