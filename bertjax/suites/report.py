"""What a suite found, read from its folder: each trial's dev scores (x100) and, per part,
the learning rate chosen on dev (the one whose median score over seeds is highest; with
one seed, the median is that run), at that rate the median of each score over seeds and
the spread (lowest to highest score), the best single run over every rate and seed, and
the chosen run (the chosen rate's seed best on dev: GLUE submits its test predictions).
The suite's kind draws the table and the notes under it; this writes them, as text,
OUT/report/NAME.md and NAME.csv (and a plot a part where the kind has them), beside the
published numbers of a model of the checkpoint's shape."""

import collections
import csv
import dataclasses
import io
import os
import statistics

from bertjax.suites.contract import SuiteKind
from bertjax.sweep import figures as figures_lib
from bertjax.sweep import trial_queue
from bertjax.sweep import worker as worker_lib
from bertjax.sweep.definition import SweepDefinition
from data_pipeline import files
from data_pipeline.errors import UserError

# The published models' shapes (layers, hidden size), by which a checkpoint is matched.
PUBLISHED_SHAPES = {
    (2, 128): "bert-tiny",
    (4, 256): "bert-mini",
    (4, 512): "bert-small",
    (8, 512): "bert-medium",
    (12, 768): "bert-base",
    (24, 1024): "bert-large",
}


@dataclasses.dataclass(frozen=True)
class Trial:
    index: int
    part: str  # the task or version it runs
    learning_rate: float
    seed: int
    status: str  # the queue's: done, running, queued, failed, ...
    workdir: str
    minutes: float
    scores: dict  # x100 (a threshold as it is), e.g. {"mrpc f1": 88.1, "mrpc accuracy": 84.0}
    score: float | None  # what the rate is chosen by (kind.score); None unless finished
    test: dict  # the trial's test files: name -> {"examples", "source"}
    error: str  # why it failed, if it did


@dataclasses.dataclass(frozen=True)
class Suite:
    kind: SuiteKind
    out: str
    definition: SweepDefinition
    parts: tuple[str, ...]
    trials: tuple[Trial, ...]
    model: str | None  # the published model of the checkpoint's shape
    shape: tuple[int, int] | None  # the checkpoint's (layers, hidden size)
    init_checkpoint: str = ""


@dataclasses.dataclass(frozen=True)
class Summary:
    part: str
    by_rate: dict  # learning rate -> [score of each finished seed]
    chosen_rate: float | None
    median: dict  # score name -> the median over the chosen rate's seeds
    spread: tuple[float, float] | None  # the chosen rate's lowest and highest score
    best: Trial | None  # best on dev over every rate and seed
    chosen: Trial | None  # the chosen rate's best seed


def load(kind: SuiteKind, out: str, storage: str, study_name: str) -> Suite:
    study, definition = trial_queue.load(
        trial_queue.storage_url(out, storage), study_name, heartbeat_s=60
    )
    if definition.program != kind.program or kind.part_key not in (definition.trials or [{}])[0]:
        raise UserError(f"{out}: not a {kind.title} suite; for another sweep: bertjax.sweep report")
    from bertjax import workdir as workdir_lib

    trials = []
    for record in trial_queue.records(study):
        params = record.params
        # Under `out` as the caller names it: the recorded paths may be relative to
        # another working directory (`run` in the checkout, this in a notebook).
        workdir = os.path.join(out, "trials", worker_lib.trial_name(record.index, params))
        part = kind.part_of(params)
        scores, test, error = {}, {}, ""
        if record.status == "failed":
            error = record.last.user_attrs.get("error", "")
        if record.status == "done":
            results = workdir_lib.read_results(workdir)
            if not results:
                error = f"done, but {os.path.join(workdir, workdir_lib.RESULTS_FILE)} is missing"
            scores, test = kind.read_scores(part, results, workdir)
        trials.append(
            Trial(
                index=record.index,
                part=part,
                learning_rate=params["optimizer.learning_rate"],
                seed=params["seed"],
                status=record.status,
                workdir=workdir,
                minutes=record.seconds / 60,
                scores=scores,
                score=kind.score(part, scores),
                test=test,
                error=error,
            )
        )
    parts = tuple(dict.fromkeys(kind.part_of(t) for t in definition.trials))
    init = definition.overrides.get("init_checkpoint", "")
    shape = _shape(init)  # None if unreadable
    model = PUBLISHED_SHAPES.get(shape)
    return Suite(kind, out, definition, parts, tuple(trials), model, shape, init)


def _shape(init_checkpoint: str) -> tuple[int, int] | None:
    from bertjax import workdir as workdir_lib

    try:
        config = workdir_lib.read_model_config(init_checkpoint)
    except (UserError, OSError):
        return None
    return (config.num_hidden_layers, config.hidden_size) if config else None


def summarize(suite: Suite, part: str) -> Summary:
    trials = [t for t in suite.trials if t.part == part and t.score is not None]
    rates = dict.fromkeys(t["optimizer.learning_rate"] for t in suite.definition.trials)
    by_rate = {rate: [t.score for t in trials if t.learning_rate == rate] for rate in rates}
    scored = {rate: statistics.median(v) for rate, v in by_rate.items() if v}
    if not scored:
        return Summary(part, by_rate, None, {}, None, None, None)
    chosen_rate = max(scored, key=scored.get)  # the first of equals, in --learning_rates order
    at_rate = [t for t in trials if t.learning_rate == chosen_rate]
    median = {
        key: statistics.median(t.scores[key] for t in at_rate if key in t.scores)
        for key in dict.fromkeys(key for t in at_rate for key in t.scores)
    }
    values = [t.score for t in at_rate]
    return Summary(
        part,
        by_rate,
        chosen_rate,
        median,
        (min(values), max(values)),
        max(trials, key=lambda t: t.score),
        max(at_rate, key=lambda t: t.score),
    )


def number(value) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def best_cell(summary: Summary) -> str:
    """The best run on dev: its score, rate and seed."""
    best = summary.best
    return (
        f"{number(best.score)} (lr {worker_lib.format_value(best.learning_rate)}, seed {best.seed})"
    )


def aligned(rows: list[list[str]]) -> list[str]:
    """A table's rows as lines of columns padded to their widths."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def markdown_table(rows: list[list[str]]) -> list[str]:
    """A table's rows (the first the header) as a Markdown table's lines."""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return lines + ["| " + " | ".join(r) + " |" for r in rows[1:]]


def status_lines(suite: Suite) -> list[str]:
    """How many trials are in each state, then each failed one with its error."""
    counts = collections.Counter(t.status for t in suite.trials)
    shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    lines = [f"trials: {len(suite.definition.trials)} ({shown})"]
    for t in suite.trials:
        if t.error:
            rate = worker_lib.format_value(t.learning_rate)
            lines.append(f"trial {t.index} ({t.part}, lr {rate}, seed {t.seed}): {t.error}")
    return lines


def text(suite: Suite) -> str:
    """What `report` prints: the table, then the kind's notes."""
    lines = aligned(suite.kind.table(suite))
    for block in suite.kind.notes(suite):
        lines += [""] + block
    return "\n".join(lines)


def markdown(suite: Suite) -> str:
    kind = suite.kind
    lines = [f"# {kind.title} suite {suite.out}", ""] + markdown_table(kind.table(suite))
    lines += [""] + [f"- {line}" for block in kind.notes(suite) for line in block]
    lines += ["", kind.footer, ""] if kind.footer else [""]
    return "\n".join(lines)


def csv_text(suite: Suite) -> str:
    kind = suite.kind
    keys = kind.score_keys(suite.parts)
    score = [kind.score_column] if kind.score_column else []
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["trial", kind.part, "learning_rate", "seed", "status", *score, *keys,
                     "minutes", "workdir"])  # fmt: skip
    for t in suite.trials:
        writer.writerow(
            [t.index, t.part, t.learning_rate, t.seed, t.status, *([t.score] if score else []),
             *(t.scores.get(k, "") for k in keys), f"{t.minutes:.2f}", t.workdir]
        )  # fmt: skip
    return out.getvalue()


def figure(suite: Suite, part: str):
    """The score against the learning rate, a point per seed, the medians joined and the
    chosen rate marked; None before any trial of the part is done."""
    s = summarize(suite, part)
    if s.chosen_rate is None:
        return None
    plt = figures_lib.pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    rates = sorted(r for r, v in s.by_rate.items() if v)
    for rate in rates:
        ax.scatter([rate] * len(s.by_rate[rate]), s.by_rate[rate], color="tab:blue", alpha=0.7)
    medians = [statistics.median(s.by_rate[r]) for r in rates]
    ax.plot(rates, medians, color="tab:gray", label="median over seeds")
    ax.axvline(s.chosen_rate, color="tab:orange", linestyle="--", label="chosen")
    ax.set_xscale("log")
    ax.set(xlabel="learning rate", ylabel="dev score (x100)", title=f"{part}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def write(suite: Suite) -> str:
    """Writes OUT/report/ (NAME.md, NAME.csv, NAME_PART.png); returns the printed text."""
    name = suite.kind.name
    out_dir = os.path.join(suite.out, "report") if "://" not in suite.out else f"{name}_report"
    os.makedirs(out_dir, exist_ok=True)
    written = [os.path.join(out_dir, f"{name}.md"), os.path.join(out_dir, f"{name}.csv")]
    files.atomic_write(written[0], markdown(suite))
    files.atomic_write(written[1], csv_text(suite))
    parts = suite.parts if suite.kind.plots else ()
    figures = {f"{name}_{part}": figure(suite, part) for part in parts}
    written += figures_lib.save(figures, out_dir)
    return text(suite) + f"\nwritten: {', '.join(written)}"
