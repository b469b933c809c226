"""`python -m bertjax.suites glue` end to end, as processes: data directories that lack a file
refused in one line before anything trains; a suite of two tasks (a headerless one, and
MNLI with its mismatched dev set and the diagnostic set; a regression is in
tests/commands_test.py) killed with kill -9 and run again, which resumes, reports and writes a submission that validates.
The report's arithmetic and the submission's checks are tested beside this file."""

import csv
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import pytest
from support import REPO, readme, suites
from support.notebooks import run_notebook

from bertjax.suites.glue import submission
from data_pipeline import native_log
from data_pipeline.finetune import glue_files, glue_sample

glue_cli = functools.partial(suites.suite_cli, "glue")


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    return glue_sample.write(str(tmp_path_factory.mktemp("glue")))


def test_the_readmes_sample_is_every_task_in_glues_layout_and_is_not_overwritten(tmp_path):
    root = readme.tour_dir(tmp_path / "tour")
    argv = readme.command("python -m bertjax.suites glue sample")
    made = subprocess.run(
        [sys.executable, *argv[1:]], cwd=root, env=suites.ENV, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr[-3000:]
    sample = root / argv[-1]
    glue_files.check_data_dir(str(sample), list(glue_files.LAYOUTS))  # every file of every task
    assert "scores on it mean nothing" in made.stdout
    again = subprocess.run(
        [sys.executable, *argv[1:]], cwd=root, env=suites.ENV, capture_output=True, text=True
    )
    assert again.returncode == 2 and f"error: {argv[-1]}: not empty" in again.stderr


@pytest.mark.parametrize(
    "tasks, remove, message",
    [
        ("rte", "RTE/test.tsv", "RTE/test.tsv: missing, for the task rte; the GLUE download"),
        pytest.param(
            "cola,mnli",
            "diagnostic",
            "diagnostic: missing, for the task ax; the GLUE download",
            marks=pytest.mark.integration,
        ),
        pytest.param(
            "mnli",
            "MNLI/dev_mismatched.tsv",
            "MNLI/dev_mismatched.tsv: missing, for the task mnli",
            marks=pytest.mark.integration,
        ),
        pytest.param("rte", "", "--init_checkpoint=", marks=pytest.mark.integration),
    ],
)
def test_a_data_directory_without_a_file_is_refused_in_one_line(
    tmp_path, glue_dir, tasks, remove, message
):
    data = tmp_path / "glue"
    shutil.copytree(glue_dir, data)
    if remove:
        target = data / remove
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    out = tmp_path / "out"
    # The checkpoint is looked at after the data: a data error comes first.
    result = glue_cli(
        "run", "--init_checkpoint", tmp_path / "nowhere", "--data_dir", data, "--out", out,
        "--tasks", tasks,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert message in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tasks", "rte,mnlii"], "--tasks: unknown task 'mnlii'"),
        (["--learning_rates", "3e-5,fast"], "--learning_rates: 'fast' is not a number"),
        (["--seeds", "0"], "--seeds=0: must be at least 1"),
        (
            ["--config.optimizer.learning_rat=1"],
            "unknown config key: config.optimizer.learning_rat",
        ),
    ],
)
def test_a_bad_option_is_refused_in_one_line(tmp_path, glue_dir, args, message):
    out = tmp_path / "out"
    result = glue_cli(
        "run", "--init_checkpoint", tmp_path, "--data_dir", glue_dir, "--out", out,
        *args,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert message in line, line
    assert not out.exists()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.integration
def test_a_suite_killed_and_run_again_resumes_reports_and_submits(
    tmp_path, glue_dir, pretrained_run, monkeypatch
):
    out = tmp_path / "out"
    args = [
        "run", "--init_checkpoint", pretrained_run.workdir, "--data_dir", glue_dir,
        "--out", out, "--tasks", "cola,mnli", "--learning_rates", "5e-5,3e-5",
        "--parallel", "2", "--config.data.max_seq_length=32", "--config.train_batch_size=8",
    ]  # fmt: skip
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(
            [sys.executable, "-m", "bertjax.suites", "glue", *map(str, args)],
            cwd=REPO,
            env=suites.ENV,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    trials = out / "trials"
    try:
        wait_for(
            lambda: any(trials.glob("*/glue/results.json")) or first.poll() is not None,
            600,
            "a trial with its predictions",
        )
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    recorded = re.findall(r"trial (\S+): done in", (tmp_path / "first.log").read_text())
    predicted = {p.parent.parent.name for p in trials.glob("*/glue/results.json")}

    resumed = glue_cli(*args)
    assert resumed.returncode == 0, resumed.stderr[-3000:] + resumed.stdout[-3000:]
    assert "4 trial(s)" in resumed.stdout
    for name in recorded:  # recorded as done before the kill: not run again
        assert (trials / f"{name}.log").read_text().count("\n$ ") == 1, name
    for name in predicted - set(recorded):
        # Killed after its predictions, before its worker recorded it: run again, it finds
        # the training done and the predictions written.
        last = (trials / f"{name}.log").read_text().split("\n$ ")[-1]
        assert not re.search(r"^step +\d+/", last, re.M) and "test predictions:" in last, last

    # Each trial: its dev scores, and its test sets predicted from its last checkpoint.
    workdirs = sorted(p for p in trials.iterdir() if p.is_dir())
    assert len(workdirs) == 4
    mnli = [w for w in workdirs if "glue_task=mnli" in w.name]
    for workdir in mnli:
        assert sorted(os.listdir(workdir / "glue" / "test")) == [
            "AX.tsv",
            "MNLI-m.tsv",
            "MNLI-mm.tsv",
        ]

    # The report: every trial in the CSV; the chosen rate is the better of the two (one seed).
    with open(out / "report" / "glue.csv", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4 and {row["status"] for row in table} == {"done"}
    cola = {float(r["learning_rate"]): float(r["task_score"]) for r in table if r["task"] == "cola"}
    chosen = max(cola, key=cola.get)
    (line,) = [line for line in resumed.stdout.splitlines() if line.startswith("cola ")]
    assert line.split()[2] == repr(chosen), line
    assert f"{cola[chosen]:.1f}" in line
    for task in ("cola", "mnli"):
        assert (out / "report" / f"glue_{task}.png").stat().st_size > 0
    assert "GLUE score: - (needs every task)" in resumed.stdout

    # The submission: the four test sets of these tasks, valid, zipped.
    folder = out / "submission"
    names = ["AX.tsv", "CoLA.tsv", "MNLI-m.tsv", "MNLI-mm.tsv"]
    assert sorted(os.listdir(folder)) == names
    read = functools.partial(glue_files.read_split, glue_dir)
    assert submission.validate(str(folder), read, only=set(names)) == []
    assert sorted(zipfile.ZipFile(f"{folder}.zip").namelist()) == names
    assert "valid for the 4 test sets the suite ran" in resumed.stdout
    chosen_cola = next(w for w in workdirs if f"cola,learning_rate={chosen!r}" in w.name)
    assert (folder / "CoLA.tsv").read_text() == (chosen_cola / "glue/test/CoLA.tsv").read_text()

    # `report` alone prints the same table; so does the notebook, from its own folder.
    again = glue_cli("report", out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert line in again.stdout
    monkeypatch.setenv("BERTJAX_GLUE_DIR", str(out))
    text, images = run_notebook("glue_report.ipynb", monkeypatch)
    assert line in text and "cola: trial " in text
    assert [shown for shown in text.splitlines() if native_log.is_noise(shown)] == []
    assert images == 2  # a plot a task
