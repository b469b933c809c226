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

import numpy as np
import pytest
from support import once, serve_savedmodel
from support.commands import SMALL_MODEL, run

pytestmark = pytest.mark.command


def test_pretraining_trains_reports_and_resumes(command_pretrained):
    first, second = command_pretrained["first_stdout"], command_pretrained["second_stdout"]
    assert "held-out MLM accuracy" in first
    assert first.count("    answer '") == 1  # --fill_mask_examples=1
    assert re.search(r"^goodput: \d+% of ", first, re.M)
    # The second run starts from checkpoint 4: it logs step 6 alone (every 2nd step).
    assert re.findall(r"^step +(\d+)/6 ", second, re.M) == ["6"], second
    assert sorted(os.listdir(f"{command_pretrained['workdir']}/checkpoints")) == ["4", "6"]
    # No start-up lines, no warnings.
    assert command_pretrained["first_stderr"] == command_pretrained["second_stderr"] == ""


def test_goodput_counts_both_processes(command_pretrained):
    report = run("bertjax.goodput", command_pretrained["workdir"], "--json")
    result = json.loads(report.stdout)
    assert len(result["processes"]) == 2, result
    assert 0 < result["fractions"]["productive"] < 1


@pytest.fixture(scope="session")
def finetuned(command_pretrained, tmp_path_factory, worker_id) -> dict:
    """The README's fine-tuning step from the small pretrained workdir, a few steps."""

    def make(folder):
        run("data_pipeline.builtin_tasks", "--out_dir", folder / "tasks")
        result = run(
            "bertjax.main", "--config", "experiments/finetune/builtin_topics.py",
            "--workdir", folder / "w", f"--config.init_checkpoint={command_pretrained['workdir']}",
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


def test_export_and_import_hugging_face(command_pretrained, finetuned, tmp_path):
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
        command_pretrained["workdir"],
        tmp_path / "pretrained",
    )
    imported = run("bertjax.convert", "import", "--format", "hf", tmp_path / "pretrained",
                   tmp_path / "imported")  # fmt: skip
    assert "2 layers, hidden 64" in imported.stdout, imported.stdout
    assert (tmp_path / "imported" / "checkpoints" / "0").is_dir()


def test_a_shrunk_student_is_distilled_from_its_teacher(command_pretrained, tmp_path):
    from support.beir_files import write_beir

    teacher = command_pretrained["workdir"]
    shrunk = run("bertjax.convert", "shrink", teacher, tmp_path / "one", "--layers", "1")
    assert shrunk.stdout.startswith(
        f"shrunk {teacher} step 6 to {tmp_path / 'one'}: layers 1 of 2, a pretraining workdir of "
    ), shrunk.stdout
    config = json.loads((tmp_path / "one" / "model_config.json").read_text())
    assert config["num_hidden_layers"] == 1

    distilled = run("bertjax.main", "--config", "experiments/distill/minilm_l3.py",
                    "--workdir", tmp_path / "student",
                    f"--config.init_checkpoint={tmp_path / 'one'}",
                    f"--config.distill.teacher={teacher}",
                    f"--config.data.beir_dir={write_beir(tmp_path / 'beir')}",
                    "--config.data.max_query_length=16", "--config.data.max_seq_length=32",
                    "--config.train_batch_size=8", "--config.log_every_steps=2")  # fmt: skip
    train_lines = [line for line in distilled.stdout.splitlines() if line.startswith("step ")]
    assert train_lines and all(" distill " in line and " in-batch " in line for line in train_lines)
    assert re.search(r"^best  \(step \d+\): ndcg@10 [01]\.\d+", distilled.stdout, re.M)
    [step] = [name for name in os.listdir(tmp_path / "student/checkpoints") if name.isdigit()]
    manifest = json.loads((tmp_path / f"student/checkpoints/{step}/manifest.json").read_text())
    assert not any(name.startswith("teacher") for name in manifest["arrays"])  # never saved


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


def test_a_glue_suite_of_two_tasks_runs_and_reports(tmp_path, command_pretrained):
    sample = tmp_path / "glue_sample"
    run("bertjax.suites", "glue", "sample", sample, "--rows", "8")
    out = tmp_path / "glue"
    result = run(
        "bertjax.suites", "glue", "run", "--init_checkpoint", command_pretrained["workdir"], "--data_dir", sample,
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
    command_pretrained, tmp_path, test_extras
):
    import pytrec_eval
    from support.beir_files import write_beir

    beir = write_beir(tmp_path / "beir")
    base = ["--config", "experiments/finetune/retrieval.py", "--workdir", tmp_path / "w"]
    base += [
        f"--config.init_checkpoint={command_pretrained['workdir']}",
        f"--config.data.beir_dir={beir}",
    ]
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


def test_negatives_are_mined_with_an_embedder(command_pretrained, tmp_path):
    from support.beir_files import write_beir

    beir = write_beir(tmp_path / "beir")
    embedder = command_pretrained["workdir"]
    negatives = tmp_path / "train.jsonl"
    mined = run("bertjax.retrieval", "mine", "--workdir", embedder, "--data_dir", beir,
                "--split", "train", "--out", negatives, "--rank_range=2:20",
                "--num_negatives=3")  # fmt: skip
    assert mined.stdout == f"wrote {negatives}: negatives of 30 queries\n"
    lines = [json.loads(line) for line in negatives.read_text().splitlines()]
    assert len(lines) == 30 and all(len(line["negatives"]) == 3 for line in lines)
