"""One short run of each user-facing command, as a user starts it: what `make test` runs
besides the unit tier.

Each program runs once, a few steps on the small test vocabulary, and its output is
checked the way a person reads it. The scenarios behind each command (kills, resumes
on other meshes, learning to a target, the suites' kill and resume) are in the rest of
the suite, `make test-all`. The launcher's dry runs (tests/bertjax/tpu/launch_test.py)
and the SQuAD suite (tests/bertjax/suites/suites_squad_test.py) carry the `command`
marker where they are.
"""

import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from support import REPO, SMALL_VOCAB_SIZE, once, serve_savedmodel

pytestmark = pytest.mark.command

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}

# make_small_config (tests/conftest.py) as overrides of tiny_cpu.py.
SMALL_MODEL = {
    "train_batch_size": 8, "eval_batch_size": 8, "num_eval_steps": 2, "eval_every_steps": 4,
    "checkpoint_every_steps": 4, "log_every_steps": 2, "optimizer.warmup_steps": 2,
    "data.max_seq_length": 64, "data.max_predictions_per_seq": 10,
    "data.document_buffer_size": 32, "data.shuffle_buffer_size": 64,
    "data.vocab_size": SMALL_VOCAB_SIZE, "model.hidden_size": 64,
    "model.num_attention_heads": 2, "model.intermediate_size": 128,
    "model.max_position_embeddings": 64,
}  # fmt: skip


def flags(overrides: dict) -> list[str]:
    return [f"--config.{key}={value}" for key, value in overrides.items()]


def run(module: str, *args, cwd=REPO, expect: int = 0) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == expect, result.stderr[-3000:] + result.stdout[-3000:]
    return result


@pytest.fixture(scope="session")
def pretrained(tmp_path_factory, worker_id, small_vocab_file) -> dict:
    """`python -m bertjax.main` for 4 steps, then the same command at 6: it resumes."""

    def make(folder):
        small = {**SMALL_MODEL, "data.vocab_file": small_vocab_file}
        args = ["--config", "experiments/pretrain/tiny_cpu.py", "--workdir", folder / "w"]
        args += flags(small)
        first = run("bertjax.main", *args, "--config.num_train_steps=4", "--fill_mask_examples=1")
        second = run("bertjax.main", *args, "--config.num_train_steps=6")
        return {
            "workdir": str(folder / "w"),
            **{f"first_{k}": getattr(first, k) for k in ("stdout", "stderr")},
            **{f"second_{k}": getattr(second, k) for k in ("stdout", "stderr")},
        }

    return once(tmp_path_factory, worker_id, "commands_pretrained", make)


def test_pretraining_trains_reports_and_resumes(pretrained):
    first, second = pretrained["first_stdout"], pretrained["second_stdout"]
    assert "held-out MLM accuracy" in first
    assert first.count("    answer '") == 1  # --fill_mask_examples=1
    assert re.search(r"^goodput: \d+% of ", first, re.M)
    # The second run starts from checkpoint 4: it logs step 6 alone (every 2nd step).
    assert re.findall(r"^step +(\d+)/6 ", second, re.M) == ["6"], second
    assert sorted(os.listdir(f"{pretrained['workdir']}/checkpoints")) == ["4", "6"]
    # No start-up lines, no warnings.
    assert pretrained["first_stderr"] == pretrained["second_stderr"] == ""


def test_goodput_counts_both_processes(pretrained):
    report = run("bertjax.goodput", pretrained["workdir"], "--json")
    result = json.loads(report.stdout)
    assert len(result["processes"]) == 2, result
    assert 0 < result["fractions"]["productive"] < 1


@pytest.fixture(scope="session")
def finetuned(pretrained, tmp_path_factory, worker_id) -> dict:
    """The README's fine-tuning step from the small pretrained workdir, a few steps."""

    def make(folder):
        run("data_pipeline.builtin_tasks", "--out_dir", folder / "tasks")
        result = run(
            "bertjax.main", "--config", "experiments/finetune/builtin_topics.py",
            "--workdir", folder / "w", f"--config.init_checkpoint={pretrained['workdir']}",
            f"--config.data.train_file={folder}/tasks/topics_train.tsv",
            f"--config.data.eval_file={folder}/tasks/topics_eval.tsv",
            "--config.num_train_epochs=0.2", "--config.log_every_steps=1",
        )  # fmt: skip
        return {
            "workdir": str(folder / "w"),
            "tasks": str(folder / "tasks"),
            "stdout": result.stdout,
        }

    return once(tmp_path_factory, worker_id, "commands_finetuned", make)


def test_finetuning_scores_and_predict_labels_each_row(finetuned, tmp_path):
    workdir, tasks = finetuned["workdir"], finetuned["tasks"]
    assert re.search(r"final \(step \d+\): accuracy 0\.\d+", finetuned["stdout"])
    with open(f"{workdir}/results.json", encoding="utf-8") as f:
        assert json.load(f)["eval"]["accuracy"] >= 0
    out = tmp_path / "predictions.jsonl"
    run("bertjax.predict", "--workdir", workdir, "--input", f"{tasks}/topics_eval.tsv",
        "--output", out)  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 87
    assert {row["label"] for row in rows} <= {"debugger", "string-methods"}


def test_export_and_import_hugging_face(pretrained, finetuned, tmp_path):
    exported = run(
        "bertjax.convert", "export", "--format", "hf", finetuned["workdir"], tmp_path / "topics"
    )
    assert "BertForSequenceClassification" in exported.stdout
    config = json.loads((tmp_path / "topics" / "config.json").read_text())
    assert config["id2label"] == {"0": "debugger", "1": "string-methods"}

    run(
        "bertjax.convert",
        "export",
        "--format",
        "hf",
        pretrained["workdir"],
        tmp_path / "pretrained",
    )
    imported = run("bertjax.convert", "import", "--format", "hf", tmp_path / "pretrained",
                   tmp_path / "imported")  # fmt: skip
    assert "2 layers, hidden 64" in imported.stdout, imported.stdout
    assert (tmp_path / "imported" / "checkpoints" / "0").is_dir()


def test_export_a_savedmodel_that_takes_text(finetuned, tmp_path):
    exported = run("bertjax.convert", "export", "--format", "savedmodel", finetuned["workdir"],
                   tmp_path / "served")  # fmt: skip
    assert "text -> label, logits, probabilities" in exported.stdout, exported.stdout
    request = {"signature": "serving_default", "inputs": {"text": ["Set a breakpoint.", ""]}}
    (response,) = serve_savedmodel.serve(tmp_path / "served", [request], tmp_path)
    assert set(response["label"]) <= {"debugger", "string-methods"}
    np.testing.assert_allclose(response["probabilities"].sum(axis=1), 1.0, rtol=1e-5)


SWEEP = """\
from experiments.pretrain import tiny_cpu


def get_config():
    config = tiny_cpu.get_config()
    for key, value in {overrides}.items():
        config.update_from_flattened_dict({{key: value}})
    return config


def get_hyper(hyper):
    return hyper.sweep("config.seed", [0, 1])
"""


def test_a_sweep_of_two_trials_runs_and_reports(tmp_path, small_vocab_file):
    overrides = {**SMALL_MODEL, "num_train_steps": 4, "data.vocab_file": small_vocab_file}
    config = tmp_path / "experiment.py"
    config.write_text(SWEEP.format(overrides=overrides))
    sweep_dir = tmp_path / "sweep"
    result = run("bertjax.sweep", "run", "--config", config, "--sweep_dir", sweep_dir,
                 "--parallel", "2")  # fmt: skip
    assert "2 trial(s)" in result.stdout, result.stdout
    report = run("bertjax.sweep", "report", sweep_dir)
    assert re.search(r"^best: ", report.stdout, re.M), report.stdout
    with open(sweep_dir / "report" / "report.csv", encoding="utf-8") as f:
        assert [row["status"] for row in csv.DictReader(f)] == ["done", "done"]


def test_a_glue_suite_of_two_tasks_runs_and_reports(tmp_path, pretrained_run):
    sample = tmp_path / "glue_sample"
    run("bertjax.suites", "glue", "sample", sample, "--rows", "8")
    out = tmp_path / "glue"
    result = run(
        "bertjax.suites", "glue", "run", "--init_checkpoint", pretrained_run.workdir, "--data_dir", sample,
        "--out", out, "--tasks", "rte,stsb", "--learning_rates", "5e-5", "--parallel", "2",
        "--config.data.max_seq_length=32", "--config.train_batch_size=8",
    )  # fmt: skip
    for task in ("rte ", "stsb "):
        assert any(line.startswith(task) for line in result.stdout.splitlines()), result.stdout
    assert "GLUE score: - (needs every task)" in result.stdout
    assert sorted(os.listdir(out / "submission")) == ["RTE.tsv", "STS-B.tsv"]
    again = run("bertjax.suites", "glue", "report", out)
    assert "GLUE score: - (needs every task)" in again.stdout


def test_retrieval_fine_tunes_evaluates_as_trec_eval_and_scores_sts(
    pretrained, tmp_path, test_extras
):
    import pytrec_eval
    from support.beir_files import write_beir

    beir = write_beir(tmp_path / "beir")
    base = ["--config", "experiments/finetune/retrieval.py", "--workdir", tmp_path / "w"]
    base += [f"--config.init_checkpoint={pretrained['workdir']}", f"--config.data.beir_dir={beir}"]
    base += ["--config.data.max_query_length=16", "--config.data.max_seq_length=32"]
    one_pair = run("bertjax.main", *base, "--config.train_batch_size=1", expect=2)
    assert one_pair.stderr.startswith("error: config.train_batch_size=1: a batch of one pair")
    # Two microbatches of 4 pairs: GradCache, the loss over all 8 (train.cached_gradients).
    trained = run("bertjax.main", *base, "--config.train_batch_size=8",
                  "--config.optimizer.num_microbatches=2", "--config.log_every_steps=1")  # fmt: skip
    assert re.search(r"^best  \(step \d+\): ndcg@10 [01]\.\d+  mrr@10", trained.stdout, re.M)
    assert trained.stderr == ""

    out = tmp_path / "scored"
    evaluated = run("bertjax.retrieval", "evaluate", "--workdir", tmp_path / "w", "--data_dir",
                    beir, "--split", "test", "--out", out)  # fmt: skip
    assert re.match(r"ndcg@10 [01]\.\d{4}  mrr@10", evaluated.stdout)
    ours = json.loads((out / "metrics.json").read_text())
    with open(beir / "qrels" / "test.tsv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    qrels = {row["query-id"]: {row["corpus-id"]: int(row["score"])} for row in rows}
    with open(out / "run.trec", encoding="utf-8") as f:
        trec_run = pytrec_eval.parse_run(f)
    measures = {"ndcg_cut_10": "ndcg@10", "recall_100": "recall@100", "map_cut_100": "map@100"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(trec_run)
    for measure, name in measures.items():
        mean = sum(query[measure] for query in theirs.values()) / len(theirs)
        assert abs(ours[name] - mean) < 1e-9, (name, ours[name], mean)

    sts = tmp_path / "sts.tsv"
    sts.write_text("sentence1\tsentence2\tscore\na cat\ta cat\t5\na cat\tthe hall\t0\n"
                   "a dog\ta dog sat\t4\n")  # fmt: skip
    scored = run("bertjax.retrieval", "sts", "--workdir", tmp_path / "w", "--file", sts)
    assert re.fullmatch(r"STS spearman -?[01]\.\d{4} \(3 pairs\)\n", scored.stdout)
