"""GLUE submission files: written for every test set of a GLUE download, validated as the
server would take them, zipped; each kind of mistake found."""

import functools
import os
import zipfile

import numpy as np
import pytest

from bertjax.suites.glue import submission
from data_pipeline.finetune import glue_files, glue_sample


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    return glue_sample.write(str(tmp_path_factory.mktemp("glue")))


def write_all(glue_dir, folder):
    for task, split in submission.FILES:
        test = glue_files.read_split(glue_dir, task, split)
        layout = glue_files.LAYOUTS[task]
        rows = len(test)
        if layout.label_values:
            predictions = np.arange(rows) % len(layout.label_values)
        else:
            predictions = np.linspace(0, 5, rows)
        submission.write(folder, task, split, test.index, predictions)


def test_a_complete_submission_validates_and_zips(glue_dir, tmp_path):
    folder = str(tmp_path / "submission")
    write_all(glue_dir, folder)
    assert sorted(os.listdir(folder)) == sorted(submission.FILES.values())
    assert submission.validate(folder, functools.partial(glue_files.read_split, glue_dir)) == []
    with open(os.path.join(folder, "MNLI-mm.tsv"), encoding="utf-8") as f:
        assert f.read().splitlines()[:3] == [
            "index\tprediction",
            "0\tentailment",
            "1\tneutral",
        ]
    with open(os.path.join(folder, "STS-B.tsv"), encoding="utf-8") as f:
        assert f.read().splitlines()[-1] == "7\t5.000"
    with open(os.path.join(folder, "CoLA.tsv"), encoding="utf-8") as f:
        assert f.read().splitlines()[1:3] == ["0\t0", "1\t1"]
    archive = submission.zip_folder(folder)
    assert archive == folder + ".zip"
    with zipfile.ZipFile(archive) as z:
        assert sorted(z.namelist()) == sorted(submission.FILES.values())


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda f: os.remove(f"{f}/RTE.tsv"), "RTE.tsv: missing (the rte test set)"),
        (lambda f: open(f"{f}/notes.txt", "w").close(), "notes.txt: not a GLUE submission file"),
        (lambda f: edit(f"{f}/QNLI.tsv", lambda lines: lines[:-1]),
         "QNLI.tsv: 7 rows; the test file"),
        (lambda f: edit(f"{f}/MRPC.tsv", lambda lines: ["id\tlabel", *lines[1:]]),
         "MRPC.tsv: the header must be 'index<TAB>prediction'"),
        (lambda f: edit(f"{f}/AX.tsv", lambda lines: [*lines[:2], "1\tmaybe", *lines[3:]]),
         "AX.tsv: line 3: 'maybe' is none of ['entailment', 'neutral', 'contradiction']"),
        (lambda f: edit(f"{f}/SST-2.tsv", lambda lines: [lines[0], *lines[:0:-1]]),
         "SST-2.tsv: line 2 is not index '0' and a prediction"),
        (lambda f: edit(f"{f}/STS-B.tsv", lambda lines: [*lines[:2], "1\tnan", *lines[3:]]),
         "STS-B.tsv: line 3: 'nan' is not a score"),
    ],
    ids=["missing", "unknown", "rows", "header", "label", "order", "score"],
)  # fmt: skip
def test_each_mistake_is_named(glue_dir, tmp_path, damage, problem):
    folder = str(tmp_path / "submission")
    write_all(glue_dir, folder)
    damage(folder)
    problems = submission.validate(folder, functools.partial(glue_files.read_split, glue_dir))
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def edit(path, change):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(change(lines)) + "\n")


def test_a_prediction_count_that_differs_from_the_test_set_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"RTE.tsv: 2 predictions for 3 examples"):
        submission.write(str(tmp_path), "rte", "test", ["0", "1", "2"], [0, 1])


def test_a_partial_submission_is_checked_for_the_files_it_has(glue_dir, tmp_path):
    folder = str(tmp_path / "submission")
    write_all(glue_dir, folder)
    for name in os.listdir(folder):
        if name not in ("RTE.tsv", "CoLA.tsv"):
            os.remove(os.path.join(folder, name))
    read = functools.partial(glue_files.read_split, glue_dir)
    assert submission.validate(folder, read, only={"RTE.tsv", "CoLA.tsv"}) == []
    assert len(submission.validate(folder, read)) == len(submission.FILES) - 2
    edit(os.path.join(folder, "RTE.tsv"), lambda lines: lines[:-1])
    (problem,) = submission.validate(folder, read, only={"RTE.tsv", "CoLA.tsv"})
    assert problem.startswith("RTE.tsv: 7 rows; the test file"), problem
