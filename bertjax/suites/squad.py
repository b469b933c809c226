"""The SQuAD suite (`python -m bertjax.suites squad`): SQuAD 1.1 and 2.0 as the original
repository runs them, every version x learning rate x seed a bertjax.main trial of
experiments/finetune/squad.py. Per version (scores x100, on dev, by the official rules of
the version), the learning rate chosen on dev (the best median F1 over seeds; for SQuAD
2.0 the F1 at the null-score threshold best on dev, as the paper chooses it, §4.3), the
median exact match and F1 at that rate and their spread over seeds, the best run, and
for SQuAD 2.0 the tuned threshold; beside the paper's dev numbers for a model of the
checkpoint's shape."""

import math
import os

from bertjax.suites import report
from bertjax.suites.contract import SuiteKind
from bertjax.sweep import hyper
from bertjax.sweep import worker as worker_lib
from data_pipeline import files
from data_pipeline.errors import UserError

VERSIONS = ("v1.1", "v2.0")
# The official files' names.
FILES = {version: (f"train-{version}.json", f"dev-{version}.json") for version in VERSIONS}
HOW_TO_GET = (
    "the official files are at rajpurkar.github.io/SQuAD-explorer; or read TFDS "
    "squad/v1.1 and squad/v2.0 with --data_dir tfds"
)
PAPER = "Devlin et al. 2018, Tables 2 and 3 (dev, single model)"
# (version, model) -> (exact match, F1) on dev.
PUBLISHED = {
    ("v1.1", "bert-base"): (80.8, 88.5),
    ("v1.1", "bert-large"): (84.1, 90.9),
    ("v2.0", "bert-large"): (78.7, 81.9),
}
SCORES = ("exact_match", "f1", "tuned_exact_match", "tuned_f1", "tuned_f1_threshold")


def version_trials(versions, data_dir: str) -> hyper.Sweep:
    """One trial per version: what tells SQuAD 2.0 from 1.1 in the config, and its data."""
    parts = [
        hyper.sweep("config.data.version_2_with_negative", [v == "v2.0" for v in versions]),
        hyper.sweep("config.data.tfds_name", [f"squad/{v}" for v in versions]),
    ]
    if data_dir != "tfds":
        for key, position in (("train_file", 0), ("eval_file", 1)):
            paths = [os.path.join(data_dir, FILES[v][position]) for v in versions]
            parts.append(hyper.sweep(f"config.data.{key}", paths))
    return hyper.zipit(parts)


def check_data(data_dir: str, data_config: dict, versions) -> None:
    """Fails in one line on the first file or TFDS split a trial would read that is missing."""
    if data_dir != "tfds":
        if not files.isdir(data_dir):
            raise UserError(f"--data_dir={data_dir}: no such directory; {HOW_TO_GET}")
        for version in versions:
            for name in FILES[version]:
                path = os.path.join(data_dir, name)
                if not files.exists(path):
                    raise UserError(f"{path}: missing, for SQuAD {version}; {HOW_TO_GET}")
        return
    from data_pipeline.finetune.records import check_tfds_split

    for version in versions:
        for split in ("train", "validation"):
            check_tfds_split(f"squad/{version}", data_config["tfds_data_dir"], split)


def read_scores(version: str, results: dict, workdir: str) -> tuple[dict, dict]:
    """SCORES present in the run's final evaluation; x100 but the threshold."""
    final, scores = results.get("eval") or {}, {}
    for name in SCORES:
        value = final.get(name)
        if isinstance(value, int | float) and math.isfinite(value):
            scores[name] = value if name.endswith("_threshold") else 100 * value
    return scores, {}


def version_score(version: str, scores: dict) -> float | None:
    """What the rate is chosen by: F1, at the tuned threshold for SQuAD 2.0."""
    return scores.get("tuned_f1" if version == "v2.0" else "f1")


def table(suite: report.Suite) -> list[list[str]]:
    number = report.number
    rows = [["version", "chosen lr", "EM", "F1", "spread", "seeds", "best on dev",
             "tuned EM/F1 (threshold)", f"{suite.model or 'published'} (dev EM/F1)"]]  # fmt: skip
    for version in suite.parts:
        s = report.summarize(suite, version)
        published = PUBLISHED.get((version, suite.model))
        paper = f"{published[0]}/{published[1]}" if published else "-"
        if s.chosen_rate is None:
            rows.append([version, "-", "-", "-", "-", "0", "-", "-", paper])
            continue
        tuned = "-"
        if "tuned_f1" in s.median:
            tuned = (
                f"{number(s.median.get('tuned_exact_match'))}/{number(s.median['tuned_f1'])}"
                f" ({s.median.get('tuned_f1_threshold', 0.0):.2f})"
            )
        rows.append(
            [
                version,
                worker_lib.format_value(s.chosen_rate),
                number(s.median.get("exact_match")),
                number(s.median.get("f1")),
                f"{number(s.spread[0])}-{number(s.spread[1])}",
                str(len(s.by_rate[s.chosen_rate])),
                report.best_cell(s),
                tuned,
                paper,
            ]
        )
    return rows


def notes(suite: report.Suite) -> list[list[str]]:
    """The trials' count, what the numbers are, then each failed trial."""
    trials_line, *errors = report.status_lines(suite)
    if suite.model is None:
        published = "published: none for the checkpoint's shape (the paper's are Base and Large)"
    else:
        published = f"published: {PAPER}"
    scores = (
        "EM and F1 at the run's null threshold; the rate, the spread and the best run by "
        "F1 for v1.1 and by tuned F1 for v2.0 (at the null threshold best on dev, the "
        "median threshold in brackets)"
    )
    return [[trials_line, published, scores, *errors]]


def is_config(config) -> bool:
    """Whether `config` trains bertjax's SQuAD task."""
    # Imported here: the tasks load TensorFlow and JAX, which --help and a bad flag need not.
    from bertjax import tasks

    return tasks.for_config(config) is tasks.squad.TASK


SQUAD = SuiteKind(
    name="squad",
    title="SQuAD",
    part="version",
    parts=VERSIONS,
    config=os.path.join("experiments", "finetune", "squad.py"),
    learning_rates=("3e-5",),
    program="bertjax.main",
    metric="f1",
    part_key="data.version_2_with_negative",
    part_of=lambda params: "v2.0" if params["data.version_2_with_negative"] else "v1.1",
    part_trials=version_trials,
    data_overrides=lambda data_dir: {"data.source": "tfds" if data_dir == "tfds" else "files"},
    is_config=is_config,
    check_data=check_data,
    read_scores=read_scores,
    score=version_score,
    score_column="",
    score_keys=lambda versions: list(SCORES),
    table=table,
    notes=notes,
)
