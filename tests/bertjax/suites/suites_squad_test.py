"""The SQuAD suite: its trials (each version's data, rate and seed), its data checks, the
report's choices from synthetic trials, and, through its command with a tiny model, both
versions run, reported from their results and run again without rerunning anything."""

import csv
import functools
import json
import os
import pathlib

import pytest
from support import suites

from bertjax.suites import command, report, squad
from data_pipeline.errors import UserError

SQUAD = squad.SQUAD


def test_each_version_reads_its_own_files_and_knows_its_kind():
    sweep = command.suite_sweep(SQUAD.part_trials(("v1.1", "v2.0"), "/d"), (3e-5, 5e-5), 2)
    assert len(sweep.trials) == 8
    first, last = sweep.trials[0], sweep.trials[-1]
    assert first == {
        "data.version_2_with_negative": False,
        "data.tfds_name": "squad/v1.1",
        "data.train_file": "/d/train-v1.1.json",
        "data.eval_file": "/d/dev-v1.1.json",
        "optimizer.learning_rate": 3e-5,
        "seed": 0,
    }
    assert last["data.version_2_with_negative"] and last["data.eval_file"] == "/d/dev-v2.0.json"
    assert (last["optimizer.learning_rate"], last["seed"]) == (5e-5, 1)
    tfds = command.suite_sweep(SQUAD.part_trials(("v2.0",), "tfds"), (3e-5,), 1)
    assert tfds.trials == ({"data.version_2_with_negative": True, "data.tfds_name": "squad/v2.0",
                            "optimizer.learning_rate": 3e-5, "seed": 0},)  # fmt: skip


def test_a_missing_file_is_one_line_naming_it(tmp_path):
    root = suites.squad_dir(tmp_path / "squad")
    data = {"tfds_data_dir": ""}
    squad.check_data(root, data, ("v1.1", "v2.0"))
    os.remove(os.path.join(root, "dev-v2.0.json"))
    squad.check_data(root, data, ("v1.1",))
    with pytest.raises(UserError, match=r"dev-v2.0.json: missing, for SQuAD v2.0; the official"):
        squad.check_data(root, data, ("v1.1", "v2.0"))
    with pytest.raises(UserError, match="no such directory"):
        squad.check_data(str(tmp_path / "nowhere"), data, ("v1.1",))


def trial(index, version, rate, seed, **scores):
    return suites.make_trial(SQUAD, index, version, rate, seed, scores, workdir=f"/w/{index}")


def test_the_rate_is_chosen_by_the_median_f1_and_tuned_f1_for_v2(tmp_path):
    trials = (
        # v1.1: 3e-5 has the best single run, 5e-5 the best median.
        trial(0, "v1.1", 3e-5, 0, exact_match=80.0, f1=90.0),
        trial(1, "v1.1", 3e-5, 1, exact_match=60.0, f1=70.0),
        trial(2, "v1.1", 3e-5, 2, exact_match=60.0, f1=71.0),
        trial(3, "v1.1", 5e-5, 0, exact_match=70.0, f1=80.0),
        trial(4, "v1.1", 5e-5, 1, exact_match=71.0, f1=81.0),
        trial(5, "v1.1", 5e-5, 2, exact_match=72.0, f1=79.0),
        # v2.0: chosen by tuned F1, not by F1 at threshold 0.
        trial(6, "v2.0", 3e-5, 0, exact_match=50.0, f1=60.0, tuned_exact_match=55.0,
              tuned_f1=62.0, tuned_f1_threshold=-1.0),
        trial(7, "v2.0", 5e-5, 0, exact_match=40.0, f1=50.0, tuned_exact_match=60.0,
              tuned_f1=70.0, tuned_f1_threshold=-2.5),
    )  # fmt: skip
    suite = suites.make_suite(SQUAD, tmp_path, trials, model="bert-base")
    v1 = report.summarize(suite, "v1.1")
    assert v1.chosen_rate == 5e-5 and v1.median == {"exact_match": 71.0, "f1": 80.0}
    assert v1.spread == (79.0, 81.0) and v1.best.index == 0
    v2 = report.summarize(suite, "v2.0")
    assert v2.chosen_rate == 5e-5 and v2.median["tuned_f1_threshold"] == -2.5
    rows = squad.table(suite)
    assert rows[1][-1] == "80.8/88.5"  # the paper's BERT-Base, v1.1 dev
    assert rows[2][-1] == "-"  # no BERT-Base number for v2.0
    assert rows[2][-2] == "60.0/70.0 (-2.50)"
    assert len(report.csv_text(suite).splitlines()) == 1 + len(trials)


squad_cli = functools.partial(suites.suite_cli, "squad")


@pytest.mark.command
def test_both_versions_run_report_their_results_and_resume_as_done(tmp_path, command_pretrained):
    out = tmp_path / "out"
    args = [
        "run", "--init_checkpoint", command_pretrained["workdir"], "--data_dir",
        suites.squad_dir(tmp_path / "squad"), "--out", out, "--parallel", "2",
        "--config.data.max_seq_length=64", "--config.data.max_query_length=16",
        "--config.data.doc_stride=32", "--config.train_batch_size=8",
        "--config.eval_batch_size=8",
    ]  # fmt: skip
    first = squad_cli(*args)
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-3000:]
    with open(out / "report" / "squad.csv", encoding="utf-8") as f:
        rows = {row["version"]: row for row in csv.DictReader(f)}
    for version, row in rows.items():
        results = json.loads((pathlib.Path(row["workdir"]) / "results.json").read_text())
        assert float(row["f1"]) == pytest.approx(100 * results["eval"]["f1"])
        (line,) = [x for x in first.stdout.splitlines() if x.startswith(f"{version} ")]
        assert f"{100 * results['eval']['f1']:.1f}" in line.split()
        if version == "v2.0":
            assert float(row["tuned_f1"]) >= float(row["f1"])
            assert f"({results['eval']['tuned_f1_threshold']:.2f})" in line
    again = squad_cli(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 trial(s), 0 queued now" in again.stdout
    assert " started " not in again.stdout
