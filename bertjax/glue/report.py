"""What a GLUE suite found, as the paper's protocol reads it, and the submission it makes.

Per task (scores x100, on the dev sets):
- each trial's metrics as GLUE defines them (benchmark.COLUMNS), and its task score:
  their mean (MNLI: of matched and mismatched accuracy), as the GLUE score counts a task;
- the chosen learning rate: the one whose median task score over seeds is highest (the
  paper chose on dev among its four; with one seed, the median is that run);
- at that rate, the median of each metric over seeds and the spread (lowest to highest
  task score); the best single run on dev over every rate and seed;
- the chosen run, whose test predictions are submitted: the chosen rate's seed best on dev.

Then the GLUE score and the paper's average of the medians (dev), beside the published
test scores of a model of the checkpoint's shape (published.py). Dev and test scores
differ: the comparison says how far off a run is, not that it matches.
"""

import contextlib
import csv
import dataclasses
import io
import math
import os
import shutil
import statistics
import sys

from bertjax.glue import benchmark, predictions, published, submission
from bertjax.sweep import trial_queue
from bertjax.sweep import worker as worker_lib
from bertjax.sweep.definition import SweepDefinition
from data_pipeline import files
from data_pipeline.errors import UserError

PROGRAM = "bertjax.glue.trial"
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


@dataclasses.dataclass(frozen=True)
class Trial:
    index: int
    task: str
    learning_rate: float
    seed: int
    status: str  # the queue's: done, running, queued, failed, ...
    workdir: str
    minutes: float
    scores: dict  # "column metric" -> x100, e.g. {"mrpc f1": 88.1, "mrpc accuracy": 84.0}
    test: dict  # the trial's test files: name -> {"examples", "source"}
    error: str  # why it failed, if it did

    @property
    def task_score(self) -> float | None:
        """The mean of the task's columns, as the GLUE score counts the task; None unless
        every column has a score."""
        values = [self.scores.get(f"{c} {m}") for c, m in COLUMNS[self.task]]
        return None if None in values else statistics.fmean(values)


@dataclasses.dataclass(frozen=True)
class TaskSummary:
    task: str
    by_rate: dict  # learning rate -> [task score of each finished seed]
    chosen_rate: float | None
    median: dict  # "column metric" -> the median over the chosen rate's seeds
    spread: tuple[float, float] | None  # the chosen rate's lowest and highest task score
    best: Trial | None  # best on dev over every rate and seed
    chosen: Trial | None  # the chosen rate's best seed: the run submitted


@dataclasses.dataclass(frozen=True)
class Suite:
    out: str
    definition: SweepDefinition
    tasks: tuple[str, ...]
    trials: tuple[Trial, ...]
    model: str | None  # the published model of the checkpoint's shape
    shape: tuple[int, int] | None  # the checkpoint's (layers, hidden size)
    init_checkpoint: str = ""


def load(out: str, storage: str, study_name: str) -> Suite:
    study, definition = trial_queue.load(
        trial_queue.storage_url(out, storage), study_name, heartbeat_s=60
    )
    if definition.program != PROGRAM:
        raise UserError(f"{out}: a bertjax.sweep sweep, not a GLUE suite; use bertjax.sweep report")
    from bertjax import workdir as workdir_lib

    trials = []
    for record in trial_queue.records(study):
        params, last = record.params, record.last
        # Under `out` as the caller names it: the recorded paths may be relative to
        # another working directory (`run` in the checkout, this in a notebook).
        workdir = os.path.join(out, "trials", worker_lib.trial_name(record.index, params))
        task = params["data.glue_task"]
        scores, test, error = {}, {}, ""
        if record.status == "failed":
            error = last.user_attrs.get("error", "")
        if record.status == "done":
            results = workdir_lib.read_results(workdir)
            if not results:
                error = f"done, but {os.path.join(workdir, workdir_lib.RESULTS_FILE)} is missing"
            evaluated = {"dev": (results.get("eval") or {})}
            extra = predictions.read(workdir) or {}
            evaluated.update(extra.get("dev", {}))
            test = extra.get("test", {})
            for column, metric in COLUMNS[task]:
                split = "dev_mismatched" if column == "mnli-mm" else "dev"
                value = evaluated.get(split, {}).get(metric)
                if isinstance(value, int | float) and math.isfinite(value):
                    scores[f"{column} {metric}"] = 100 * value
        trials.append(
            Trial(
                index=record.index,
                task=task,
                learning_rate=params["optimizer.learning_rate"],
                seed=params["seed"],
                status=record.status,
                workdir=workdir,
                minutes=record.seconds / 60,
                scores=scores,
                test=test,
                error=error,
            )
        )
    tasks = tuple(dict.fromkeys(t["data.glue_task"] for t in definition.trials))
    shape = _shape(definition.overrides.get("init_checkpoint", ""))  # None if unreadable
    model = published.matching(*shape) if shape else None
    init = definition.overrides.get("init_checkpoint", "")
    return Suite(out, definition, tasks, tuple(trials), model, shape, init)


def _shape(init_checkpoint: str) -> tuple[int, int] | None:
    from bertjax import workdir as workdir_lib

    try:
        config = workdir_lib.read_model_config(init_checkpoint)
    except (UserError, OSError):
        return None
    return (config.num_hidden_layers, config.hidden_size) if config else None


def summarize(suite: Suite, task: str) -> TaskSummary:
    trials = [t for t in suite.trials if t.task == task and t.task_score is not None]
    by_rate = {}
    for rate in dict.fromkeys(t["optimizer.learning_rate"] for t in suite.definition.trials):
        by_rate[rate] = [t.task_score for t in trials if t.learning_rate == rate]
    scored = {rate: statistics.median(v) for rate, v in by_rate.items() if v}
    if not scored:
        return TaskSummary(task, by_rate, None, {}, None, None, None)
    chosen_rate = max(scored, key=scored.get)  # the first of equals, in --learning_rates order
    at_rate = [t for t in trials if t.learning_rate == chosen_rate]
    median = {
        key: statistics.median(t.scores[key] for t in at_rate if key in t.scores)
        for key in (f"{c} {m}" for c, m in COLUMNS[task])
        if any(key in t.scores for t in at_rate)
    }
    values = [t.task_score for t in at_rate]
    return TaskSummary(
        task,
        by_rate,
        chosen_rate,
        median,
        (min(values), max(values)),
        max(trials, key=lambda t: t.task_score),
        max(at_rate, key=lambda t: t.task_score),
    )


def glue_columns(summaries: dict) -> dict:
    """The medians in published.SCORES' columns: a number, or (first, second) for a pair."""
    columns = {}
    for task, summary in summaries.items():
        values = [summary.median.get(f"{c} {m}") for c, m in COLUMNS[task]]
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


def _number(value) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def _published_cell(task: str, model: str | None) -> str:
    if model is None:
        return "-"
    values = published.SCORES[model][2]
    if task == "mnli":
        return f"{_number(values.get('mnli-m'))}/{_number(values.get('mnli-mm'))}"
    value = values.get(task)
    if isinstance(value, tuple):
        return "/".join(_number(v) for v in value)
    return _number(value)


def table(suite: Suite) -> list[list[str]]:
    header = ["task", "metric", "chosen lr", "median (dev)", "spread", "seeds", "best on dev"]
    header.append(f"{suite.model} (test)" if suite.model else "published")
    rows = [header]
    for task in suite.tasks:
        s = summarize(suite, task)
        metric = "/".join(m if c == task else c for c, m in COLUMNS[task])
        if s.chosen_rate is None:
            rows.append([task, metric, "-", "-", "-", "0", "-", _published_cell(task, suite.model)])
            continue
        median = "/".join(_number(s.median.get(f"{c} {m}")) for c, m in COLUMNS[task])
        rows.append(
            [
                task,
                metric,
                worker_lib.format_value(s.chosen_rate),
                median,
                f"{_number(s.spread[0])}-{_number(s.spread[1])}",
                str(len(s.by_rate[s.chosen_rate])),
                f"{_number(s.best.task_score)} (lr {worker_lib.format_value(s.best.learning_rate)},"
                f" seed {s.best.seed})",
                _published_cell(task, suite.model),
            ]
        )
    return rows


def aligned(rows: list[list[str]]) -> list[str]:
    """A table's rows as lines of columns padded to their widths."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def markdown_table(rows: list[list[str]]) -> list[str]:
    """A table's rows (the first the header) as a Markdown table's lines."""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return lines + ["| " + " | ".join(r) + " |" for r in rows[1:]]


def status_lines(trials, total: int, name) -> list[str]:
    """How many trials are in each state, then each failed one (`name(trial)` says which
    task or version) with its error."""
    counts = {}
    for t in trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    lines = [f"trials: {total} ({shown})"]
    for t in trials:
        if t.error:
            rate = worker_lib.format_value(t.learning_rate)
            lines.append(f"trial {t.index} ({name(t)}, lr {rate}, seed {t.seed}): {t.error}")
    return lines


def text(suite: Suite) -> str:
    """What `report` prints: the table, the averages and the status of the trials."""
    lines = aligned(table(suite)) + [""] + _average_lines(suite) + [""] + _status_lines(suite)
    return "\n".join(lines)


def _average_lines(suite: Suite) -> list[str]:
    summaries = {task: summarize(suite, task) for task in suite.tasks}
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
    return lines


def _status_lines(suite: Suite) -> list[str]:
    return status_lines(suite.trials, len(suite.definition.trials), lambda t: t.task)


def markdown(suite: Suite) -> str:
    lines = [f"# GLUE suite {suite.out}", ""] + markdown_table(table(suite))
    lines += [""] + [f"- {line}" for line in _average_lines(suite) + _status_lines(suite)]
    lines += ["", "Scores x100 on the dev sets; published scores are on the test sets.", ""]
    return "\n".join(lines)


def csv_text(suite: Suite) -> str:
    keys = [f"{c} {m}" for task in suite.tasks for c, m in COLUMNS[task]]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["trial", "task", "learning_rate", "seed", "status", "task_score", *keys,
                     "minutes", "workdir"])  # fmt: skip
    for t in suite.trials:
        writer.writerow(
            [t.index, t.task, t.learning_rate, t.seed, t.status, t.task_score,
             *(t.scores.get(k, "") for k in keys), f"{t.minutes:.2f}", t.workdir]
        )  # fmt: skip
    return out.getvalue()


def _pyplot():
    import matplotlib

    if "ipykernel" not in sys.modules:  # files from the command line, inline in a notebook
        matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


def figure(suite: Suite, task: str):
    """The task score against the learning rate, a point per seed, the medians joined and
    the chosen rate marked; None before any trial of the task is done."""
    s = summarize(suite, task)
    if s.chosen_rate is None:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    rates = sorted(r for r, v in s.by_rate.items() if v)
    for rate in rates:
        ax.scatter([rate] * len(s.by_rate[rate]), s.by_rate[rate], color="tab:blue", alpha=0.7)
    medians = [statistics.median(s.by_rate[r]) for r in rates]
    ax.plot(rates, medians, color="tab:gray", label="median over seeds")
    ax.axvline(s.chosen_rate, color="tab:orange", linestyle="--", label="chosen")
    ax.set_xscale("log")
    ax.set(xlabel="learning rate", ylabel="dev score (x100)", title=f"{task}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def write(suite: Suite) -> str:
    """Writes OUT/report/ (glue.md, glue.csv, glue_TASK.png); returns the printed text."""
    out_dir = os.path.join(suite.out, "report") if "://" not in suite.out else "glue_report"
    os.makedirs(out_dir, exist_ok=True)
    written = [os.path.join(out_dir, "glue.md"), os.path.join(out_dir, "glue.csv")]
    files.atomic_write(written[0], markdown(suite))
    files.atomic_write(written[1], csv_text(suite))
    for task in suite.tasks:
        fig = figure(suite, task)
        if fig is not None:
            written.append(os.path.join(out_dir, f"glue_{task}.png"))
            fig.savefig(written[-1], dpi=100)
            _pyplot().close(fig)
    return text(suite) + f"\nwritten: {', '.join(written)}"


@dataclasses.dataclass(frozen=True)
class Made:
    folder: str
    archive: str | None
    problems: tuple[str, ...]  # what the server would refuse among the files the suite made
    summary: str


def write_submission(suite: Suite) -> Made:
    """Copies the chosen run's test files of each task into OUT/submission/, validates the
    folder against the test sets and zips it."""
    folder = os.path.join(suite.out, "submission")
    # Made again from the chosen runs: no file of an earlier choice stays.
    if "://" not in folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    elif files.isdir(folder):
        import tensorflow as tf

        tf.io.gfile.rmtree(folder)
    lines = []
    for task in suite.tasks:
        chosen = summarize(suite, task).chosen
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

    ran = {name for task in suite.tasks for key in predictions.test_sets(task)
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
