"""The GLUE suite (`python -m bertjax.suites glue`): every task x learning rate x seed a
trial of bertjax.suites.glue.trial on experiments/finetune/glue.py, read as the paper's
protocol reads it, and the submission it makes.

Per task (scores x100, on the dev sets):
- each trial's metrics as GLUE defines them (COLUMNS), and its task score: their mean
  (MNLI: of matched and mismatched accuracy), as the GLUE score counts a task;
- the rate chosen, the medians, the spread and the best run (report.summarize);
- the chosen run, whose test predictions are submitted: the chosen rate's seed best on dev.

Then the GLUE score and the paper's average of the medians (dev), beside the published
test scores of a model of the checkpoint's shape (published.py). Dev and test scores
differ: the comparison says how far off a run is, not that it matches.
"""

import contextlib
import dataclasses
import math
import os
import shutil
import statistics

from bertjax.suites import report
from bertjax.suites.contract import SuiteKind
from bertjax.suites.glue import benchmark, published
from bertjax.sweep import hyper
from bertjax.sweep import worker as worker_lib
from data_pipeline import files
from data_pipeline.errors import UserError

TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
# task -> (the GLUE columns of its dev scores, each from a metric of the run's evaluation
# or of predictions.OTHER_DEV)
COLUMNS = {
    "cola": (("cola", "matthews_corrcoef"),),
    "sst2": (("sst2", "accuracy"),),
    "mrpc": (("mrpc", "f1"), ("mrpc", "accuracy")),
    "stsb": (("stsb", "pearson"), ("stsb", "spearman")),
    "qqp": (("qqp", "f1"), ("qqp", "accuracy")),
    "mnli": (("mnli-m", "accuracy"), ("mnli-mm", "accuracy")),
    "qnli": (("qnli", "accuracy"),),
    "rte": (("rte", "accuracy"),),
    "wnli": (("wnli", "accuracy"),),
}


def _keys(task: str) -> list[str]:
    return [f"{c} {m}" for c, m in COLUMNS[task]]


def task_trials(tasks, data_dir: str) -> hyper.Sweep:
    return hyper.sweep("config.data.glue_task", tasks)


def data_overrides(data_dir: str) -> dict:
    return {"data.glue_dir": "" if data_dir == "tfds" else data_dir}


def is_config(config) -> bool:
    """Whether `config` trains bertjax's classification task on GLUE's data."""
    # Imported here: the tasks load TensorFlow and JAX, which --help and a bad flag need not.
    from bertjax import tasks

    trains = tasks.for_config(config)
    return trains is tasks.classification.TASK and config.data.get("source") == "glue"


def check_data(data_dir: str, data_config: dict, tasks) -> None:
    """Fails in one line on the first split the trials would read that is not there."""
    # Imported here: the GLUE readers load TensorFlow, which --help and a bad flag need not.
    from bertjax.suites.glue import predictions
    from data_pipeline.finetune import glue_files

    if data_dir != "tfds" and not files.isdir(data_dir):
        raise UserError(f"--data_dir={data_dir}: no such directory; {glue_files.HOW_TO_GET}")
    needed = [key for task in tasks for key in predictions.data_splits(task)]
    if data_config["glue_dir"]:
        by_task = {}
        for task, split in needed:
            by_task.setdefault(task, []).append(split)
        glue_files.check_data_dir(data_config["glue_dir"], by_task, splits_of=by_task.get)
        return
    from data_pipeline.finetune.records import check_tfds_split

    for task, split in needed:
        tfds_split = "test" if task == "ax" else split.replace("dev", "validation")
        check_tfds_split(f"glue/{task}", data_config["tfds_data_dir"], tfds_split)


def read_scores(task: str, results: dict, workdir: str) -> tuple[dict, dict]:
    """The trial's GLUE columns, from its evaluation and its predictions' dev scores, and
    its test files."""
    from bertjax.suites.glue import predictions

    evaluated = {"dev": (results.get("eval") or {})}
    extra = predictions.read(workdir) or {}
    evaluated.update(extra.get("dev", {}))
    scores = {}
    for column, metric in COLUMNS[task]:
        split = "dev_mismatched" if column == "mnli-mm" else "dev"
        value = evaluated.get(split, {}).get(metric)
        if isinstance(value, int | float) and math.isfinite(value):
            scores[f"{column} {metric}"] = 100 * value
    return scores, extra.get("test", {})


def task_score(task: str, scores: dict) -> float | None:
    """The mean of the task's columns, as the GLUE score counts the task; None unless
    every column has a score."""
    values = [scores.get(key) for key in _keys(task)]
    return None if None in values else statistics.fmean(values)


def glue_columns(summaries: dict) -> dict:
    """The medians in published.SCORES' columns: a number, or (first, second) for a pair."""
    columns = {}
    for task, summary in summaries.items():
        values = [summary.median.get(key) for key in _keys(task)]
        if any(v is None for v in values):
            continue
        if task == "mnli":
            columns["mnli-m"], columns["mnli-mm"] = values
        else:
            columns[task] = tuple(values) if len(values) == 2 else values[0]
    return columns


def averages(columns: dict) -> dict:
    """The GLUE score and the paper's average, where the tasks they need are there."""
    out = {}
    with contextlib.suppress(KeyError):
        out["GLUE score"] = benchmark.glue_score(columns)
    with contextlib.suppress(KeyError):
        out["paper average (no WNLI)"] = benchmark.paper_average(columns)
    return out


def _published_cell(task: str, model: str | None) -> str:
    if model is None:
        return "-"
    values = published.SCORES[model][2]
    if task == "mnli":
        return f"{report.number(values.get('mnli-m'))}/{report.number(values.get('mnli-mm'))}"
    value = values.get(task)
    if isinstance(value, tuple):
        return "/".join(report.number(v) for v in value)
    return report.number(value)


def table(suite: report.Suite) -> list[list[str]]:
    header = ["task", "metric", "chosen lr", "median (dev)", "spread", "seeds", "best on dev"]
    header.append(f"{suite.model} (test)" if suite.model else "published")
    rows = [header]
    for task in suite.parts:
        s = report.summarize(suite, task)
        metric = "/".join(m if c == task else c for c, m in COLUMNS[task])
        if s.chosen_rate is None:
            rows.append([task, metric, "-", "-", "-", "0", "-", _published_cell(task, suite.model)])
            continue
        rows.append(
            [
                task,
                metric,
                worker_lib.format_value(s.chosen_rate),
                "/".join(report.number(s.median.get(key)) for key in _keys(task)),
                f"{report.number(s.spread[0])}-{report.number(s.spread[1])}",
                str(len(s.by_rate[s.chosen_rate])),
                report.best_cell(s),
                _published_cell(task, suite.model),
            ]
        )
    return rows


def notes(suite: report.Suite) -> list[list[str]]:
    """The averages beside the published ones, then the status of the trials."""
    summaries = {task: report.summarize(suite, task) for task in suite.parts}
    found = averages(glue_columns(summaries))
    lines = []
    for name in ("GLUE score", "paper average (no WNLI)"):
        ours = f"{found[name]:.1f} (dev)" if name in found else "- (needs every task)"
        line = f"{name}: {ours}"
        if suite.model is not None:
            source, overall, _ = published.SCORES[suite.model]
            is_theirs = (name == "GLUE score") == (source == published.TURC)
            if is_theirs:
                line += f"; {suite.model} {overall} (test), {source}"
        lines.append(line)
    if suite.model is None and suite.shape is not None:
        shape = f"{suite.shape[0]} layers, hidden {suite.shape[1]}"
        lines.append(f"published: none for the checkpoint's shape ({shape})")
    elif suite.model is None:
        where = suite.init_checkpoint or "the init checkpoint"
        lines.append(f"published: not matched ({where}: its model config cannot be read here)")
    return [lines, report.status_lines(suite)]


@dataclasses.dataclass(frozen=True)
class Made:
    folder: str
    archive: str | None
    problems: tuple[str, ...]  # what the server would refuse among the files the suite made
    summary: str


def write_submission(suite: report.Suite) -> Made:
    """Copies the chosen run's test files of each task into OUT/submission/, validates the
    folder against the test sets and zips it."""
    from bertjax.suites.glue import predictions, submission

    folder = os.path.join(suite.out, "submission")
    # Made again from the chosen runs: no file of an earlier choice stays.
    if "://" not in folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    elif files.isdir(folder):
        import tensorflow as tf

        tf.io.gfile.rmtree(folder)
    lines = []
    for task in suite.parts:
        chosen = report.summarize(suite, task).chosen
        if chosen is None or not chosen.test:
            lines.append(f"{task}: no finished run with test predictions")
            continue
        for name in sorted(chosen.test):
            source = os.path.join(chosen.workdir, predictions.TEST_DIR, name)
            files.atomic_copy(source, os.path.join(folder, name))
        lines.append(
            f"{task}: {', '.join(sorted(chosen.test))} from trial {chosen.index} "
            f"(lr {worker_lib.format_value(chosen.learning_rate)}, seed {chosen.seed})"
        )
    data_config = suite.definition.config_values["data"]

    def read_test(task, split):
        from data_pipeline.finetune import classification_input

        return classification_input.read_glue_split(
            data_config["glue_dir"], data_config["tfds_data_dir"], task, split
        )

    ran = {name for task in suite.parts for key in predictions.test_sets(task)
           for name in [submission.FILES[key]]}  # fmt: skip
    problems = submission.validate(folder, read_test, only=ran)
    missing = sorted(set(submission.FILES.values()) - ran)
    archive = submission.zip_folder(folder) if "://" not in folder else None
    lines.append(f"submission: {folder} ({archive})")
    if problems:
        lines += [f"  refused: {p}" for p in problems]
    elif missing:
        lines.append(
            f"  valid for the {len(ran)} test sets the suite ran; the GLUE server needs all "
            f"{len(submission.FILES)}: missing {', '.join(missing)}"
        )
    else:
        lines.append(f"  valid: all {len(submission.FILES)} files, checked against the test sets")
    return Made(folder, archive, tuple(problems), "\n".join(lines))


def write_sample(folder: str, rows: int) -> None:
    from data_pipeline.finetune import glue_sample

    glue_sample.write(folder, rows=rows)


GLUE = SuiteKind(
    name="glue",
    title="GLUE",
    part="task",
    parts=TASKS,
    config=os.path.join("experiments", "finetune", "glue.py"),
    learning_rates=("5e-5", "4e-5", "3e-5", "2e-5"),  # paper section 4.1
    program="bertjax.suites.glue.trial",
    metric="",
    part_key="data.glue_task",
    part_of=lambda params: params["data.glue_task"],
    part_trials=task_trials,
    data_overrides=data_overrides,
    is_config=is_config,
    check_data=check_data,
    read_scores=read_scores,
    score=task_score,
    score_column="task_score",
    score_keys=lambda tasks: [key for task in tasks for key in _keys(task)],
    table=table,
    notes=notes,
    footer="Scores x100 on the dev sets; published scores are on the test sets.",
    plots=True,
    submit=write_submission,
    write_sample=write_sample,
)
