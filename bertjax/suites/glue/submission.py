"""The files the GLUE server (gluebenchmark.com) takes: one TSV a test set, named as the
server expects (CoLA.tsv, ..., MNLI-m.tsv, MNLI-mm.tsv, ..., AX.tsv), each with the
header `index<TAB>prediction` and a row for every example of the test file, in its
order, the index copied from it. Labels are spelled as the task's files spell them
(0/1 for CoLA, SST-2, MRPC, QQP and WNLI; entailment/neutral/contradiction for MNLI
and AX; entailment/not_entailment for QNLI and RTE); STS-B's are scores.

`write` writes one file, `validate` checks a folder of them against the test files
of a GLUE download (names, headers, row counts, indices, labels) and `zip_folder`
packs it as the server's upload form takes it.
"""

import math
import os
import zipfile

import numpy as np

from data_pipeline import files
from data_pipeline.finetune import glue_files

# (task, the split of its test file) -> the server's file name.
FILES = {
    ("cola", "test"): "CoLA.tsv",
    ("sst2", "test"): "SST-2.tsv",
    ("mrpc", "test"): "MRPC.tsv",
    ("stsb", "test"): "STS-B.tsv",
    ("qqp", "test"): "QQP.tsv",
    ("mnli", "test_matched"): "MNLI-m.tsv",
    ("mnli", "test_mismatched"): "MNLI-mm.tsv",
    ("qnli", "test"): "QNLI.tsv",
    ("rte", "test"): "RTE.tsv",
    ("wnli", "test"): "WNLI.tsv",
    ("ax", "diagnostic"): "AX.tsv",
}
HEADER = ("index", "prediction")


def write(folder: str, task: str, split: str, index, predictions) -> str:
    """Writes the server's file of (`task`, `split`): `predictions` are label ids (into
    the task's labels) or, for STS-B, scores, one per test example in `index` order."""
    name = FILES[(task, split)]
    layout = glue_files.LAYOUTS[task]
    predictions = np.asarray(predictions)
    if len(predictions) != len(index):
        raise ValueError(f"{name}: {len(predictions)} predictions for {len(index)} examples")
    if layout.label_values:
        cells = [layout.label_values[int(p)] for p in predictions]
    else:
        cells = [f"{float(p):.3f}" for p in predictions]
    rows = ["\t".join(HEADER)] + [f"{i}\t{cell}" for i, cell in zip(index, cells, strict=True)]
    path = os.path.join(folder, name)
    files.atomic_write(path, "\n".join(rows) + "\n")
    return path


def validate(folder: str, read_test, only=None) -> list[str]:
    """What the server would refuse in `folder`, one line each (none: it is complete):
    a missing or unknown file, a header other than index/prediction, a row count or
    index differing from the test file's, a label the task does not have.
    `read_test(task, split)` gives a test set as a glue_files.GlueSplit (from a GLUE
    download: functools.partial(glue_files.read_split, data_dir)); `only`, a set of
    file names, checks those alone."""
    problems = []
    present = set(files.listdir(folder)) if files.isdir(folder) else set()
    expected = {name: key for key, name in FILES.items() if only is None or name in only}
    problems += [
        f"{name}: not a GLUE submission file" for name in sorted(present - set(FILES.values()))
    ]
    for name, (task, split) in expected.items():
        if name not in present:
            problems.append(f"{name}: missing (the {task} test set)")
            continue
        test = read_test(task, split)
        problems += _check(os.path.join(folder, name), glue_files.LAYOUTS[task], test)
    return problems


def _check(path: str, layout: glue_files.Layout, test: glue_files.GlueSplit) -> list[str]:
    name = os.path.basename(path)
    lines = files.read_bytes(path).decode("utf-8", errors="replace").splitlines()
    if not lines or tuple(lines[0].split("\t")) != HEADER:
        return [f"{name}: the header must be 'index<TAB>prediction'"]
    rows = [line.split("\t") for line in lines[1:]]
    if len(rows) != len(test):
        return [f"{name}: {len(rows)} rows; the test file {test.source} has {len(test)} examples"]
    for number, (row, index) in enumerate(zip(rows, test.index, strict=True), start=2):
        if len(row) != 2 or row[0] != index:
            return [f"{name}: line {number} is not index {index!r} and a prediction"]
        if layout.label_values and row[1] not in layout.label_values:
            return [f"{name}: line {number}: {row[1]!r} is none of {list(layout.label_values)}"]
        if not layout.label_values and not _is_number(row[1]):
            return [f"{name}: line {number}: {row[1]!r} is not a score"]
    return []


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def zip_folder(folder: str) -> str:
    """FOLDER.zip holding the folder's files at its top level; returns its path."""
    path = folder.rstrip("/") + ".zip"
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(os.listdir(folder)):
            archive.write(os.path.join(folder, name), arcname=name)
    os.replace(path + ".tmp", path)
    return path
