"""The GLUE suite's report on hand-made suites: the learning rate chosen by the median over
seeds, the chosen and best runs, the spread, two-metric tasks and MNLI's columns, the GLUE
score and the paper's average, the published numbers beside them, the printed text, the
CSV and the plots, and the submission made from the chosen runs' test files (in
workdirs written here, against a small GLUE download); its data checks."""

import csv
import dataclasses
import functools
import io
import os
import zipfile

import numpy as np
import pytest
from support import suites

from bertjax.suites import report
from bertjax.suites.glue import benchmark, predictions, published, submission
from bertjax.suites.glue import suite as glue
from bertjax.sweep import figures
from data_pipeline.errors import UserError
from data_pipeline.finetune import (
    classification_config,
    glue_files,
    glue_sample,
)

make_trial = functools.partial(suites.make_trial, glue.GLUE)
make_suite = functools.partial(suites.make_suite, glue.GLUE)


def rte(index, rate, seed, accuracy, **fields):
    scores = {} if accuracy is None else {"rte accuracy": accuracy}
    return make_trial(index, "rte", rate, seed, scores, **fields)


# At 2e-5 the best single run (95) and the best mean (72) but a low median (61); at 3e-5
# the best median (71), its best seed being seed 0 (72); 4e-5 not finished; a CoLA run that must not count for RTE.
MEDIAN_VS_BEST = (
    rte(0, 2e-5, 0, 60.0),
    rte(1, 2e-5, 1, 61.0),
    rte(2, 2e-5, 2, 95.0),
    rte(3, 3e-5, 0, 72.0),
    rte(4, 3e-5, 1, 70.0),
    rte(5, 3e-5, 2, 71.0),
    rte(6, 4e-5, 0, None, status="queued"),
    make_trial(7, "cola", 4e-5, 0, {"cola matthews_corrcoef": 99.0}),
)


def test_the_chosen_rate_has_the_best_median_not_the_best_single_run(tmp_path):
    suite = make_suite(tmp_path, MEDIAN_VS_BEST)
    s = report.summarize(suite, "rte")
    assert s.by_rate == {2e-5: [60.0, 61.0, 95.0], 3e-5: [72.0, 70.0, 71.0], 4e-5: []}
    assert s.chosen_rate == 3e-5
    assert s.median == {"rte accuracy": 71.0}
    assert s.spread == (70.0, 72.0)
    assert (s.best.learning_rate, s.best.seed, s.best.index) == (2e-5, 2, 2)
    assert (s.chosen.learning_rate, s.chosen.seed, s.chosen.index) == (3e-5, 0, 3)


def test_the_table_row_shows_the_chosen_rate_the_median_the_spread_and_the_best_run(tmp_path):
    suite = make_suite(tmp_path, MEDIAN_VS_BEST)
    rows = glue.table(suite)
    assert rows[0] == ["task", "metric", "chosen lr", "median (dev)", "spread", "seeds",
                       "best on dev", "published"]  # fmt: skip
    assert rows[1] == ["rte", "accuracy", "3e-05", "71.0", "70.0-72.0", "3",
                       "95.0 (lr 2e-05, seed 2)", "-"]  # fmt: skip
    assert rows[2][:3] == ["cola", "matthews_corrcoef", "4e-05"]


def test_equal_medians_choose_the_first_rate_of_the_suite(tmp_path):
    trials = (rte(0, 5e-5, 0, 70.0), rte(1, 2e-5, 0, 70.0))
    assert report.summarize(make_suite(tmp_path, trials), "rte").chosen_rate == 5e-5


def test_a_task_with_no_finished_trial_has_nothing_chosen(tmp_path):
    trials = (
        rte(0, 2e-5, 0, None, status="failed", error="out of memory"),
        make_trial(1, "mrpc", 2e-5, 0, {"mrpc f1": 80.0, "mrpc accuracy": 70.0}),
    )
    suite = make_suite(tmp_path, trials)
    s = report.summarize(suite, "rte")
    assert (s.chosen_rate, s.median, s.spread, s.best, s.chosen) == (None, {}, None, None, None)
    assert s.by_rate == {2e-5: []}
    assert glue.table(suite)[1] == ["rte", "accuracy", "-", "-", "-", "0", "-", "-"]


def test_a_two_metric_task_is_scored_by_the_mean_of_its_columns(tmp_path):
    # MRPC at 2e-5 has the higher F1 (90) but the lower mean (80); at 3e-5 the mean is 85.
    # The medians are per column: 3e-5's F1 median comes from one seed, its accuracy's
    # from another.
    trials = (
        make_trial(0, "mrpc", 2e-5, 0, {"mrpc f1": 90.0, "mrpc accuracy": 70.0}),
        make_trial(1, "mrpc", 3e-5, 0, {"mrpc f1": 84.0, "mrpc accuracy": 86.0}),
        make_trial(2, "mrpc", 3e-5, 1, {"mrpc f1": 85.0, "mrpc accuracy": 83.0}),
        make_trial(3, "mrpc", 3e-5, 2, {"mrpc f1": 86.0, "mrpc accuracy": 85.0}),
        make_trial(4, "stsb", 2e-5, 0, {"stsb pearson": 88.0, "stsb spearman": 86.0}),
    )
    assert trials[0].score == 80.0
    assert trials[4].score == 87.0
    suite = make_suite(tmp_path, trials)
    s = report.summarize(suite, "mrpc")
    assert s.chosen_rate == 3e-5
    assert s.median == {"mrpc f1": 85.0, "mrpc accuracy": 85.0}
    assert s.spread == (84.0, 85.5)
    assert s.chosen.index == 3 and s.best.index == 3
    rows = {row[0]: row for row in glue.table(suite)}
    assert rows["mrpc"][1:5] == ["f1/accuracy", "3e-05", "85.0/85.0", "84.0-85.5"]
    assert rows["stsb"][1:4] == ["pearson/spearman", "2e-05", "88.0/86.0"]
    summaries = {task: report.summarize(suite, task) for task in ("mrpc", "stsb")}
    assert glue.glue_columns(summaries) == {"mrpc": (85.0, 85.0), "stsb": (88.0, 86.0)}


def test_mnli_is_scored_by_its_matched_and_mismatched_accuracy(tmp_path):
    trial = make_trial(0, "mnli", 2e-5, 0, {"mnli-m accuracy": 84.0, "mnli-mm accuracy": 83.0})
    assert glue.COLUMNS["mnli"] == (("mnli-m", "accuracy"), ("mnli-mm", "accuracy"))
    assert trial.score == 83.5
    assert make_trial(1, "mnli", 2e-5, 0, {"mnli accuracy": 84.0}).score is None
    suite = make_suite(tmp_path, (trial,))
    s = report.summarize(suite, "mnli")
    assert s.median == {"mnli-m accuracy": 84.0, "mnli-mm accuracy": 83.0}
    assert glue.glue_columns({"mnli": s}) == {"mnli-m": 84.0, "mnli-mm": 83.0}
    assert glue.table(suite)[1][1:4] == ["mnli-m/mnli-mm", "2e-05", "84.0/83.0"]


# One run per task. Per task (GLUE score): cola 50, sst2 90, mrpc 75, stsb 50, qqp 80,
# mnli 79, qnli 88, rte 66, wnli 56; sum 634. The paper's nine: 80, 78 (MNLI), 70 (QQP F1),
# 88, 90, 50, 40 (STS-B Spearman), 80 (MRPC F1), 66; sum 642.
NINE = {
    "cola": {"cola matthews_corrcoef": 50.0},
    "sst2": {"sst2 accuracy": 90.0},
    "mrpc": {"mrpc f1": 80.0, "mrpc accuracy": 70.0},
    "stsb": {"stsb pearson": 60.0, "stsb spearman": 40.0},
    "qqp": {"qqp f1": 70.0, "qqp accuracy": 90.0},
    "mnli": {"mnli-m accuracy": 80.0, "mnli-mm accuracy": 78.0},
    "qnli": {"qnli accuracy": 88.0},
    "rte": {"rte accuracy": 66.0},
    "wnli": {"wnli accuracy": 56.0},
}
GLUE_SCORE = 634 / 9
PAPER_AVERAGE = 642 / 9


def nine_tasks(tmp_path, leave_out=(), **fields):
    trials = tuple(
        make_trial(i, task, 2e-5, 0, scores)
        for i, (task, scores) in enumerate(NINE.items())
        if task not in leave_out
    )
    return make_suite(tmp_path, trials, parts=tuple(NINE), **fields)


def summaries(suite):
    return {task: report.summarize(suite, task) for task in suite.parts}


def test_all_nine_tasks_give_the_glue_score_and_the_papers_average(tmp_path):
    suite = nine_tasks(tmp_path)
    columns = glue.glue_columns(summaries(suite))
    assert columns == {
        "cola": 50.0, "sst2": 90.0, "mrpc": (80.0, 70.0), "stsb": (60.0, 40.0),
        "qqp": (70.0, 90.0), "mnli-m": 80.0, "mnli-mm": 78.0, "qnli": 88.0, "rte": 66.0,
        "wnli": 56.0,
    }  # fmt: skip
    found = glue.averages(columns)
    assert found == pytest.approx(
        {"GLUE score": GLUE_SCORE, "paper average (no WNLI)": PAPER_AVERAGE}
    )
    assert found["GLUE score"] == pytest.approx(benchmark.glue_score(columns))
    lines = report.text(suite).splitlines()
    assert "GLUE score: 70.4 (dev)" in lines
    assert "paper average (no WNLI): 71.3 (dev)" in lines


def test_without_wnli_only_the_papers_average_is_there(tmp_path):
    suite = nine_tasks(tmp_path, leave_out=("wnli",))
    found = glue.averages(glue.glue_columns(summaries(suite)))
    assert found == pytest.approx({"paper average (no WNLI)": PAPER_AVERAGE})
    lines = report.text(suite).splitlines()
    assert "GLUE score: - (needs every task)" in lines
    assert "paper average (no WNLI): 71.3 (dev)" in lines


def test_without_rte_neither_average_is_there(tmp_path):
    suite = nine_tasks(tmp_path, leave_out=("rte",))
    assert glue.averages(glue.glue_columns(summaries(suite))) == {}
    lines = report.text(suite).splitlines()
    assert "GLUE score: - (needs every task)" in lines
    assert "paper average (no WNLI): - (needs every task)" in lines


def test_the_published_numbers_of_bert_base_stand_beside_the_runs(tmp_path):
    suite = nine_tasks(tmp_path, model="bert-base", shape=(12, 768))
    rows = {row[0]: row for row in glue.table(suite)}
    assert rows["task"][-1] == "bert-base (test)"
    assert rows["rte"][-1] == "66.4"
    assert rows["mnli"][-1] == "84.6/83.4"
    assert rows["mrpc"][-1] == "88.9/-"
    assert rows["stsb"][-1] == "-/85.8"
    assert rows["wnli"][-1] == "-"
    lines = report.text(suite).splitlines()
    # The paper publishes its average, not a GLUE score.
    assert "GLUE score: 70.4 (dev)" in lines
    assert f"paper average (no WNLI): 71.3 (dev); bert-base 79.6 (test), {published.PAPER}" in lines
    assert not any(line.startswith("published: none") for line in lines)


def test_the_compact_models_publish_a_glue_score(tmp_path):
    suite = nine_tasks(tmp_path, model="bert-tiny", shape=(2, 128))
    rows = {row[0]: row for row in glue.table(suite)}
    assert rows["mrpc"][-1] == "81.1/71.1"
    assert rows["wnli"][-1] == "62.3"
    lines = report.text(suite).splitlines()
    assert f"GLUE score: 70.4 (dev); bert-tiny 64.2 (test), {published.TURC}" in lines
    assert "paper average (no WNLI): 71.3 (dev)" in lines


def test_a_shape_with_nothing_published_says_so(tmp_path):
    suite = nine_tasks(tmp_path, model=None, shape=(6, 384))
    rows = glue.table(suite)
    assert rows[0][-1] == "published"
    assert all(row[-1] == "-" for row in rows[1:])
    text = report.text(suite)
    assert "published: none for the checkpoint's shape (6 layers, hidden 384)" in text
    assert "bert-base" not in text
    unknown = nine_tasks(tmp_path, model=None, shape=None)
    assert (
        "published: not matched (the init checkpoint: its model config cannot be read here)"
        in report.text(unknown)
    )


def test_the_text_counts_the_trials_and_shows_why_they_failed(tmp_path):
    trials = (
        rte(0, 2e-5, 0, 70.0),
        rte(1, 2e-5, 1, None, status="failed", error="CUDA out of memory"),
        rte(2, 3e-5, 0, None, status="running"),
        rte(3, 3e-5, 1, 68.0),
    )
    lines = report.text(make_suite(tmp_path, trials)).splitlines()
    assert "trials: 4 (2 done, 1 failed, 1 running)" in lines
    assert "trial 1 (rte, lr 2e-05, seed 1): CUDA out of memory" in lines
    assert not any(line.startswith("trial 0 ") or line.startswith("trial 2 ") for line in lines)


def test_the_markdown_holds_the_table_and_the_averages(tmp_path):
    suite = nine_tasks(tmp_path, leave_out=("wnli",))
    lines = report.markdown(suite).splitlines()
    assert lines[0] == f"# GLUE suite {tmp_path}"
    assert lines[2].startswith("| task | metric | chosen lr |")
    assert (
        "| rte | accuracy | 2e-05 | 66.0 | 66.0-66.0 | 1 | 66.0 (lr 2e-05, seed 0) | - |" in lines
    )
    assert "| wnli | accuracy | - | - | - | 0 | - | - |" in lines
    assert "- GLUE score: - (needs every task)" in lines
    assert "- paper average (no WNLI): 71.3 (dev)" in lines


def test_the_csv_has_a_row_per_trial(tmp_path):
    trials = (
        make_trial(0, "mrpc", 2e-5, 0, {"mrpc f1": 80.0, "mrpc accuracy": 70.0}),
        rte(1, 2e-5, 0, 66.0),
        rte(2, 3e-5, 0, None, status="failed", error="boom"),
    )
    rows = list(csv.reader(io.StringIO(report.csv_text(make_suite(tmp_path, trials)))))
    assert rows[0] == ["trial", "task", "learning_rate", "seed", "status", "task_score",
                       "mrpc f1", "mrpc accuracy", "rte accuracy", "minutes", "workdir"]  # fmt: skip
    assert len(rows) == 1 + len(trials)
    assert rows[1] == ["0", "mrpc", "2e-05", "0", "done", "75.0", "80.0", "70.0", "", "1.50",
                       "/trials/0"]  # fmt: skip
    assert rows[2][:6] == ["1", "rte", "2e-05", "0", "done", "66.0"]
    assert rows[2][6:9] == ["", "", "66.0"]
    assert rows[3][:6] == ["2", "rte", "3e-05", "0", "failed", ""]


def test_a_figure_only_for_a_task_with_a_finished_trial(tmp_path):
    from matplotlib.figure import Figure

    trials = (
        *MEDIAN_VS_BEST[:6],
        make_trial(6, "mrpc", 2e-5, 0, status="failed", error="boom"),
    )
    suite = make_suite(tmp_path, trials)
    assert report.figure(suite, "mrpc") is None
    fig = report.figure(suite, "rte")
    try:
        assert isinstance(fig, Figure)
        (ax,) = fig.axes
        assert ax.get_title() == "rte"
        points = sorted(tuple(p) for c in ax.collections for p in c.get_offsets())
        assert points == sorted((t.learning_rate, t.score) for t in trials if t.part == "rte")
        chosen_line = [line for line in ax.lines if line.get_label() == "chosen"]
        assert list(chosen_line[0].get_xdata()) == [3e-5, 3e-5]
    finally:
        figures.pyplot().close(fig)


# ----------------------------------------------------------------------------- submission


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    return glue_sample.write(str(tmp_path_factory.mktemp("glue")), rows=8)


def data_values(glue_dir):
    data = classification_config.default_config().to_dict()
    data.update(source="glue", glue_dir=glue_dir, glue_task="rte", tfds_data_dir="")
    return {"data": data}


def with_test_files(glue_dir, tmp_path, trial):
    """`trial` with a workdir holding its task's test files, as predictions.write writes
    them: every prediction 0 but that of the example numbered the trial's index."""
    workdir = str(tmp_path / "trials" / str(trial.index))
    test = {}
    for task, split in predictions.test_sets(trial.part):
        data = glue_files.read_split(glue_dir, task, split)
        guesses = (np.arange(len(data.index)) == trial.index).astype(int)
        path = submission.write(
            os.path.join(workdir, predictions.TEST_DIR), task, split, data.index, guesses
        )
        test[os.path.basename(path)] = {"examples": len(data.index), "source": data.source}
    return dataclasses.replace(trial, workdir=workdir, test=test)


def submission_suite(glue_dir, tmp_path, tasks=None):
    """RTE: 2e-5 has the best median (72.5), its seed 1 the run submitted; 3e-5 has the
    best single run (90, seed 0). MRPC: one run."""
    trials = (
        rte(0, 2e-5, 0, 70.0),
        rte(1, 2e-5, 1, 75.0),
        rte(2, 3e-5, 0, 90.0),
        rte(3, 3e-5, 1, 50.0),
        make_trial(4, "mrpc", 2e-5, 0, {"mrpc f1": 80.0, "mrpc accuracy": 70.0}),
    )
    trials = tuple(with_test_files(glue_dir, tmp_path, t) for t in trials)
    out = tmp_path / "suite"
    out.mkdir()
    return make_suite(out, trials, parts=tasks, config_values=data_values(glue_dir))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_the_submission_holds_the_chosen_runs_files(glue_dir, tmp_path):
    suite = submission_suite(glue_dir, tmp_path)
    s = report.summarize(suite, "rte")
    assert (s.chosen.index, s.best.index) == (1, 2)
    os.makedirs(os.path.join(suite.out, "submission"))
    with open(os.path.join(suite.out, "submission", "notes.txt"), "w") as f:
        f.write("from an earlier submission")
    made = glue.write_submission(suite)
    assert made.folder == os.path.join(suite.out, "submission")
    assert sorted(os.listdir(made.folder)) == ["MRPC.tsv", "RTE.tsv"]
    rte_file = read(os.path.join(made.folder, "RTE.tsv"))
    assert rte_file == read(os.path.join(s.chosen.workdir, predictions.TEST_DIR, "RTE.tsv"))
    assert rte_file != read(os.path.join(s.best.workdir, predictions.TEST_DIR, "RTE.tsv"))
    assert rte_file.splitlines()[1:3] == ["0\tentailment", "1\tnot_entailment"]
    assert made.problems == ()
    missing = sorted(set(submission.FILES.values()) - {"MRPC.tsv", "RTE.tsv"})
    assert made.summary.splitlines() == [
        "rte: RTE.tsv from trial 1 (lr 2e-05, seed 1)",
        "mrpc: MRPC.tsv from trial 4 (lr 2e-05, seed 0)",
        f"submission: {made.folder} ({made.archive})",
        "  valid for the 2 test sets the suite ran; the GLUE server needs all 11: missing "
        + ", ".join(missing),
    ]
    assert made.archive == made.folder + ".zip" and os.path.isfile(made.archive)
    with zipfile.ZipFile(made.archive) as z:
        assert sorted(z.namelist()) == ["MRPC.tsv", "RTE.tsv"]
        assert z.read("RTE.tsv").decode("utf-8") == rte_file


def test_a_damaged_test_file_of_the_chosen_run_is_refused(glue_dir, tmp_path):
    suite = submission_suite(glue_dir, tmp_path)
    # The other seeds' files are not submitted: damaging them changes nothing.
    for index in (0, 2, 3):
        os.remove(os.path.join(suite.trials[index].workdir, predictions.TEST_DIR, "RTE.tsv"))
    assert glue.write_submission(suite).problems == ()
    path = os.path.join(suite.trials[1].workdir, predictions.TEST_DIR, "RTE.tsv")
    lines = read(path).splitlines()
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[:-1]) + "\n")
    made = glue.write_submission(suite)
    (problem,) = made.problems
    assert problem.startswith("RTE.tsv: 7 rows; the test file"), problem
    assert f"  refused: {problem}" in made.summary.splitlines()
    assert "valid" not in made.summary
    assert os.path.isfile(made.archive)


def test_a_task_with_no_finished_run_leaves_its_file_missing(glue_dir, tmp_path):
    suite = submission_suite(glue_dir, tmp_path, tasks=("rte", "mrpc", "cola"))
    made = glue.write_submission(suite)
    lines = made.summary.splitlines()
    assert "cola: no finished run with test predictions" in lines
    assert made.problems == ("CoLA.tsv: missing (the cola test set)",)
    assert sorted(os.listdir(made.folder)) == ["MRPC.tsv", "RTE.tsv"]


# ----------------------------------------------------------------------------- data


def test_tfds_glue_not_prepared_is_one_line_naming_the_dataset_and_how_to_build_it(tmp_path):
    data = {"glue_dir": "", "tfds_data_dir": str(tmp_path)}
    with pytest.raises(UserError, match=r"TFDS dataset 'glue/rte' .* `tfds build glue/rte`"):
        glue.check_data("tfds", data, ["rte"])


def test_a_glue_folder_is_checked_for_every_file_the_trials_read(tmp_path):
    root = glue_sample.write(str(tmp_path / "glue"))
    data = {"glue_dir": root, "tfds_data_dir": ""}
    glue.check_data(root, data, list(glue.TASKS))  # all there
    os.remove(os.path.join(root, "QNLI", "dev.tsv"))
    glue.check_data(root, data, ["rte", "mnli"])  # not needed
    with pytest.raises(UserError, match=r"QNLI/dev.tsv: missing, for the task qnli"):
        glue.check_data(root, data, ["rte", "qnli"])
    with pytest.raises(UserError, match=r"^--data_dir=\S+/nowhere: no such directory; the GLUE"):
        glue.check_data(str(tmp_path / "nowhere"), data, ["rte"])
