"""What a SQuAD suite found: per version (scores x100, on dev, by the official rules of the
version), the learning rate chosen on dev (the best median F1 over seeds; for SQuAD 2.0
the F1 at the null-score threshold best on dev, as the paper chooses it, §4.3), the
median exact match and F1 at that rate and their spread over seeds, the best run, and
for SQuAD 2.0 the tuned threshold; beside the paper's dev numbers for a model of the
checkpoint's shape."""

import csv
import dataclasses
import io
import math
import os
import statistics

from bertjax.glue import published as glue_published
from bertjax.glue import report as glue_report
from bertjax.sweep import trial_queue
from bertjax.sweep import worker as worker_lib
from bertjax.sweep.definition import SweepDefinition
from data_pipeline import files
from data_pipeline.errors import UserError

PAPER = "Devlin et al. 2018, Tables 2 and 3 (dev, single model)"
# (version, model) -> (exact match, F1) on dev.
PUBLISHED = {
    ("v1.1", "bert-base"): (80.8, 88.5),
    ("v1.1", "bert-large"): (84.1, 90.9),
    ("v2.0", "bert-large"): (78.7, 81.9),
}
SCORES = ("exact_match", "f1", "tuned_exact_match", "tuned_f1", "tuned_f1_threshold")


@dataclasses.dataclass(frozen=True)
class Trial:
    index: int
    version: str
    learning_rate: float
    seed: int
    status: str
    workdir: str
    minutes: float
    scores: dict  # SCORES present in the run's final evaluation; x100 but the threshold
    error: str

    @property
    def score(self) -> float | None:
        """What the rate is chosen by: F1, at the tuned threshold for SQuAD 2.0."""
        return self.scores.get("tuned_f1" if self.version == "v2.0" else "f1")


@dataclasses.dataclass(frozen=True)
class Suite:
    out: str
    definition: SweepDefinition
    versions: tuple[str, ...]
    trials: tuple[Trial, ...]
    model: str | None  # the published model of the checkpoint's shape


def _version(params: dict) -> str:
    return "v2.0" if params["data.version_2_with_negative"] else "v1.1"


def load(out: str, storage: str, study_name: str) -> Suite:
    study, definition = trial_queue.load(
        trial_queue.storage_url(out, storage), study_name, heartbeat_s=60
    )
    if not definition.trials or "data.version_2_with_negative" not in definition.trials[0]:
        raise UserError(f"{out}: not a SQuAD suite; for another sweep: bertjax.sweep report")
    from bertjax import workdir as workdir_lib

    trials = []
    for record in trial_queue.records(study):
        params = record.params
        workdir = os.path.join(out, "trials", worker_lib.trial_name(record.index, params))
        scores, error = {}, ""
        if record.status == "failed":
            error = record.last.user_attrs.get("error", "")
        if record.status == "done":
            results = workdir_lib.read_results(workdir)
            if not results:
                error = f"done, but {os.path.join(workdir, workdir_lib.RESULTS_FILE)} is missing"
            final = results.get("eval") or {}
            for name in SCORES:
                value = final.get(name)
                if isinstance(value, int | float) and math.isfinite(value):
                    scores[name] = value if name.endswith("_threshold") else 100 * value
        trials.append(
            Trial(
                index=record.index,
                version=_version(params),
                learning_rate=params["optimizer.learning_rate"],
                seed=params["seed"],
                status=record.status,
                workdir=workdir,
                minutes=record.seconds / 60,
                scores=scores,
                error=error,
            )
        )
    versions = tuple(dict.fromkeys(_version(t) for t in definition.trials))
    return Suite(out, definition, versions, tuple(trials), _model(definition))


def _model(definition: SweepDefinition) -> str | None:
    from bertjax import workdir as workdir_lib

    try:
        config = workdir_lib.read_model_config(definition.overrides.get("init_checkpoint", ""))
    except (UserError, OSError):
        return None
    return glue_published.matching(config.num_hidden_layers, config.hidden_size) if config else None


@dataclasses.dataclass(frozen=True)
class VersionSummary:
    version: str
    by_rate: dict  # learning rate -> [score of each finished seed]
    chosen_rate: float | None
    median: dict  # score name -> median over the chosen rate's seeds
    spread: tuple[float, float] | None  # the chosen rate's lowest and highest score
    best: Trial | None  # best on dev over every rate and seed


def summarize(suite: Suite, version: str) -> VersionSummary:
    trials = [t for t in suite.trials if t.version == version and t.score is not None]
    by_rate = {}
    for rate in dict.fromkeys(t["optimizer.learning_rate"] for t in suite.definition.trials):
        by_rate[rate] = [t.score for t in trials if t.learning_rate == rate]
    medians = {rate: statistics.median(v) for rate, v in by_rate.items() if v}
    if not medians:
        return VersionSummary(version, by_rate, None, {}, None, None)
    chosen = max(medians, key=medians.get)  # the first of equals, in --learning_rates order
    at_rate = [t for t in trials if t.learning_rate == chosen]
    median = {
        name: statistics.median(t.scores[name] for t in at_rate if name in t.scores)
        for name in SCORES
        if any(name in t.scores for t in at_rate)
    }
    values = [t.score for t in at_rate]
    best = max(trials, key=lambda t: t.score)
    return VersionSummary(version, by_rate, chosen, median, (min(values), max(values)), best)


def _number(value) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def table(suite: Suite) -> list[list[str]]:
    rows = [["version", "chosen lr", "EM", "F1", "spread", "seeds", "best on dev",
             "tuned EM/F1 (threshold)", f"{suite.model or 'published'} (dev EM/F1)"]]  # fmt: skip
    for version in suite.versions:
        s = summarize(suite, version)
        published = PUBLISHED.get((version, suite.model))
        paper = f"{published[0]}/{published[1]}" if published else "-"
        if s.chosen_rate is None:
            rows.append([version, "-", "-", "-", "-", "0", "-", "-", paper])
            continue
        tuned = "-"
        if "tuned_f1" in s.median:
            tuned = (
                f"{_number(s.median.get('tuned_exact_match'))}/{_number(s.median['tuned_f1'])}"
                f" ({s.median.get('tuned_f1_threshold', 0.0):.2f})"
            )
        rows.append(
            [
                version,
                worker_lib.format_value(s.chosen_rate),
                _number(s.median.get("exact_match")),
                _number(s.median.get("f1")),
                f"{_number(s.spread[0])}-{_number(s.spread[1])}",
                str(len(s.by_rate[s.chosen_rate])),
                f"{_number(s.best.score)} (lr {worker_lib.format_value(s.best.learning_rate)}, "
                f"seed {s.best.seed})",
                tuned,
                paper,
            ]
        )
    return rows


def _notes(suite: Suite) -> list[str]:
    lines = glue_report.status_lines(
        suite.trials, len(suite.definition.trials), lambda t: t.version
    )
    trials_line, errors = lines[:1], lines[1:]
    if suite.model is None:
        trials_line.append(
            "published: none for the checkpoint's shape (the paper's are Base and Large)"
        )
    else:
        trials_line.append(f"published: {PAPER}")
    trials_line.append(
        "EM and F1 at the run's null threshold; the rate, the spread and the best run by "
        "F1 for v1.1 and by tuned F1 for v2.0 (at the null threshold best on dev, the "
        "median threshold in brackets)"
    )
    return trials_line + errors


def text(suite: Suite) -> str:
    return "\n".join(glue_report.aligned(table(suite)) + [""] + _notes(suite))


def markdown(suite: Suite) -> str:
    lines = [f"# SQuAD suite {suite.out}", ""] + glue_report.markdown_table(table(suite))
    lines += [""] + [f"- {line}" for line in _notes(suite)] + [""]
    return "\n".join(lines)


def csv_text(suite: Suite) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["trial", "version", "learning_rate", "seed", "status", *SCORES,
                     "minutes", "workdir"])  # fmt: skip
    for t in suite.trials:
        writer.writerow([t.index, t.version, t.learning_rate, t.seed, t.status,
                         *(t.scores.get(k, "") for k in SCORES), f"{t.minutes:.2f}", t.workdir])  # fmt: skip
    return out.getvalue()


def write(suite: Suite) -> str:
    """Writes OUT/report/squad.md and squad.csv; returns the printed text."""
    out_dir = os.path.join(suite.out, "report") if "://" not in suite.out else "squad_report"
    os.makedirs(out_dir, exist_ok=True)
    written = [os.path.join(out_dir, "squad.md"), os.path.join(out_dir, "squad.csv")]
    files.atomic_write(written[0], markdown(suite))
    files.atomic_write(written[1], csv_text(suite))
    return text(suite) + f"\nwritten: {', '.join(written)}"
