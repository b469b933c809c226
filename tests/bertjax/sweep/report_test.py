"""bertjax.sweep.report: the table, files and plots of a sweep, from hand-made rows and from a
SQLite study whose trials' workdirs hold results written here, not by a run."""

import csv
import io
import json
import math
import os

from support.sweeps import make_definition, make_study

from bertjax.sweep import figures as figures_lib
from bertjax.sweep import hyper, report, trial_queue, worker

TRIALS = (
    {"optimizer.learning_rate": 1e-4, "seed": 0},
    {"optimizer.learning_rate": 1e-3, "seed": 1},
    {"optimizer.learning_rate": 1e-2, "seed": 0},
    {"optimizer.learning_rate": 1e-5, "seed": 1},
)


def finished_sweep(sweep_dir):
    """TRIALS in a study: 0 and 1 done (final loss 2.5 and 2.0), 2 failed twice, 3 queued."""
    study, definition = make_study(sweep_dir, trials=TRIALS, max_retries=1)
    for final in (2.5, 2.0):
        trial = trial_queue.claim(study)
        index = trial.user_attrs["index"]
        workdir = sweep_dir / "trials" / worker.trial_name(index, TRIALS[index])
        workdir.mkdir(parents=True)
        trial.set_user_attr("workdir", str(workdir))
        results = {
            "eval": {"loss": final},
            "best": {"loss": final - 0.5, "step": 10},
            "best_metric": {"name": "loss"},
        }
        (workdir / "results.json").write_text(json.dumps(results))
        metrics = [
            {"step": 5, "split": "train", "loss": final + 1},
            {"step": 10, "split": "eval", "loss": final - 0.5},
            {"step": 20, "split": "eval", "loss": final},
        ]
        (workdir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
        study.tell(trial, final)
    for _ in range(2):
        trial = trial_queue.claim(study)
        trial.set_user_attr("error", "bad option")
        study.tell(trial, state=trial_queue.FAIL)
        trial_queue.requeue(study, trial_queue.frozen_trial(study, trial), failed=True)
    return study, definition


def row(index, params, status, final=None, best=None, best_step=None, **fields):
    return {
        "index": index,
        "params": params,
        "status": status,
        "attempts": 1,
        "metric": "loss" if status == "done" else "",
        "final": final,
        "best": best,
        "best_step": best_step,
        "minutes": 0.0,
        "goodput": None,
        "workdir": f"/s/trials/{index}",
        "error": "",
        **fields,
    }


def hand_rows():
    return [
        row(
            0,
            {"optimizer.learning_rate": 1e-4, "seed": 0},
            "done",
            2.5,
            2.0,
            10,
            minutes=1.5,
            goodput=0.7123,
        ),
        row(1, {"optimizer.learning_rate": 1e-3}, "done", 2.0, 1.5, 20, minutes=2.0, goodput=0.5),
        row(2, TRIALS[2], "failed", attempts=2, error="bad option"),
        row(3, {"seed": 1}, "queued"),
    ]


def test_rows_read_each_trials_results_from_its_workdir(tmp_path):
    study, definition = finished_sweep(tmp_path)
    rows = report.rows(study, definition)
    assert [
        (r["index"], r["status"], r["attempts"], r["metric"], r["final"], r["best"], r["best_step"])
        for r in rows
    ] == [
        (0, "done", 1, "loss", 2.5, 2.0, 10),
        (1, "done", 1, "loss", 2.0, 1.5, 10),
        (2, "failed", 2, "", None, None, None),
        (3, "queued", 1, "", None, None, None),
    ]
    assert [r["params"] for r in rows] == list(TRIALS)
    assert [r["error"] for r in rows] == ["", "", "bad option", ""]
    # A trial that never ran records no workdir: it is where the worker would put it.
    assert rows[2]["workdir"] == str(tmp_path / "trials" / "002-learning_rate=0.01,seed=0")
    # A metric asked of the report, not the runs' own: the runs logged none.
    assert [(r["metric"], r["final"]) for r in report.rows(study, definition, "accuracy")] == [
        ("accuracy", None)
    ] * 4


def test_the_best_trial_is_a_done_one_with_a_finite_metric_on_the_better_side():
    rows = hand_rows()
    assert report.best_row(rows, "min")["index"] == 1
    assert report.best_row(rows, "max")["index"] == 0
    rows += [
        row(4, {"seed": 0}, "failed", final=0.1),  # a metric of a failed run does not count
        row(5, {"seed": 0}, "done", final=math.nan),
        row(6, {"seed": 0}, "pruned", final=0.2),
    ]
    assert report.best_row(rows, "min")["index"] == 1
    assert report.best_row(rows[2:], "min") is None


def test_the_table_shows_every_trial_its_errors_and_the_best():
    text = report.table(hand_rows(), make_definition("/s"))
    assert text.splitlines() == [
        "trial  optimizer.learning_rate  seed  status           final loss  best loss   minutes  goodput",
        "0      0.0001                   0     done             2.5000      2.0000 @10  1.5      71%",
        "1      0.001                          done             2.0000      1.5000 @20  2.0      50%",
        "2      0.01                     0     failed (2 runs)  -           -           0.0      -",
        "3                               1     queued           -           -           0.0      -",
        "trial 2: bad option",
        "best: trial 1 (optimizer.learning_rate=0.001): loss 2.0000, /s/trials/1",
    ]
    unfinished = report.table(hand_rows()[2:], make_definition("/s", mode="max"))
    assert unfinished.splitlines()[0].split()[-6:] == [
        "final",
        "metric",
        "best",
        "metric",
        "minutes",
        "goodput",
    ]
    assert unfinished.endswith("\nbest: none yet (no trial has finished with a metric)")


def test_the_markdown_and_csv_hold_the_tables_rows(tmp_path):
    rows = hand_rows()
    assert report.markdown(rows, make_definition("/s")).splitlines() == [
        "| trial | optimizer.learning_rate | seed | status | final loss | best loss | minutes | goodput |",
        "|---|---|---|---|---|---|---|---|",
        "| 0 | 0.0001 | 0 | done | 2.5000 | 2.0000 @10 | 1.5 | 71% |",
        "| 1 | 0.001 |  | done | 2.0000 | 1.5000 @20 | 2.0 | 50% |",
        "| 2 | 0.01 | 0 | failed (2 runs) | - | - | 0.0 | - |",
        "| 3 |  | 1 | queued | - | - | 0.0 | - |",
        "",
        "best: trial 1 (optimizer.learning_rate=0.001): loss 2.0000, /s/trials/1",
    ]
    read = list(csv.DictReader(io.StringIO(report.csv_text(rows))))
    assert list(read[0]) == [
        "trial", "optimizer.learning_rate", "seed", "status", "attempts", "metric", "final",
        "best", "best_step", "minutes", "goodput", "workdir", "error",
    ]  # fmt: skip
    assert read[1] == {
        "trial": "1",
        "optimizer.learning_rate": "0.001",
        "seed": "",
        "status": "done",
        "attempts": "1",
        "metric": "loss",
        "final": "2.0",
        "best": "1.5",
        "best_step": "20",
        "minutes": "2.00",
        "goodput": "0.5000",
        "workdir": "/s/trials/1",
        "error": "",
    }
    assert (read[2]["final"], read[2]["attempts"], read[2]["error"]) == ("", "2", "bad option")


def test_each_swept_key_is_plotted_on_the_axis_its_values_need():
    rows = [
        row(0, {"optimizer.learning_rate": 1e-4, "seed": 0, "train_batch_size": 8,
                "model.hidden_act": "relu"}, "done", 2.5),
        row(1, {"optimizer.learning_rate": 2e-4, "seed": 1, "train_batch_size": 128,
                "model.hidden_act": "gelu"}, "done", 2.0),
        row(2, {"data.short_seq_prob": 0.1}, "failed"),
    ]  # fmt: skip
    space = {"optimizer.learning_rate": hyper.Range(1e-5, 1e-3, log=True)}
    figures = report.metric_figures(rows, make_definition("/s", space=space))
    try:
        # A key only a failed trial set has no point to plot.
        assert list(figures) == [
            "optimizer.learning_rate",
            "seed",
            "train_batch_size",
            "model.hidden_act",
        ]
        axes = {key: figure.axes[0] for key, figure in figures.items()}
        scales = {key: ax.get_xscale() for key, ax in axes.items()}
        # A log range, or values ten times apart: a log axis.
        assert scales == {
            "optimizer.learning_rate": "log",
            "seed": "linear",
            "train_batch_size": "log",
            "model.hidden_act": "linear",
        }
        words = axes["model.hidden_act"]
        assert [t.get_text() for t in words.get_xticklabels()] == ["gelu", "relu"]
        assert words.collections[0].get_offsets().tolist() == [[1.0, 2.5], [0.0, 2.0]]
        assert words.get_ylabel() == "final loss"
    finally:
        for figure in figures.values():
            figures_lib.pyplot().close(figure)


def test_a_report_of_two_sweeps_writes_each_and_ends_with_the_best_of_each(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    finished_sweep(first)
    make_study(second)  # nothing run yet
    text = report.report([str(first), str(second)], "", "sweep", "", "")
    assert text.startswith(f"{first} (experiment.py)\n")
    assert f"\n\n{second} (experiment.py)\n" in text
    assert text.endswith(
        "\n\nbest trial of each sweep:\n"
        "  experiment.py: optimizer.learning_rate=0.001 seed=1: loss 2.0000\n"
        "  experiment.py: none finished"
    )
    assert sorted(os.listdir(first / "report")) == [
        "curves.png",
        "metric_vs_optimizer_learning_rate.png",
        "metric_vs_seed.png",
        "report.csv",
        "report.md",
    ]
    assert sorted(os.listdir(second / "report")) == ["report.csv", "report.md"]
    for name in ("curves.png", "metric_vs_seed.png"):
        assert (first / "report" / name).read_bytes()[:4] == b"\x89PNG"


def test_the_mode_asked_of_the_report_overrides_the_one_the_sweep_recorded(tmp_path):
    finished_sweep(tmp_path)  # recorded: mode min
    text = report.report([str(tmp_path)], "", "sweep", "", "max")
    (best,) = [line for line in text.splitlines() if line.startswith("best: ")]
    assert best.startswith("best: trial 0 (optimizer.learning_rate=0.0001 seed=0): loss 2.5000")
