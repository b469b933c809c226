"""Fine-tuning end to end on small real-format files, from the tiny pretraining workdir
(conftest.py's pretrained_workdir, saved in the scan layout, which the tests only read)."""

import json
import math
import pathlib
import re

import jax
import numpy as np
import pytest
import support
import tensorflow_datasets as tfds

import bertjax
from bertjax import checkpoint, predictions, train
from bertjax import workdir as workdir_lib
from bertjax.bench import packed_step
from data_pipeline import progress
from data_pipeline.errors import ConfigError
from experiments.finetune import classify, glue, ner, retrieval, squad

pytestmark = pytest.mark.integration

TESTDATA = support.TESTDATA / "finetune"
# What a task computes is tested here, not sharding (sharding_test.py and the two-process
# tests in multihost_test.py fine-tune on meshes): one device keeps these runs clear of
# the 8 fake devices' collectives on 2 cores.
ONE_DEVICE = jax.devices()[:1]


def _mrpc_config(init_checkpoint):
    config = classify.get_config()
    config.init_checkpoint = init_checkpoint
    config.train_batch_size = 8
    config.eval_batch_size = 8
    config.num_train_epochs = 4.0  # 4 examples x 4 epochs / 8 = 2 steps
    config.log_every_steps = 1
    config.data.train_file = str(TESTDATA / "mrpc_train.tsv")
    config.data.eval_file = str(TESTDATA / "mrpc_dev.tsv")
    config.data.text_a = "#1 String"
    config.data.text_b = "#2 String"
    config.data.label = "Quality"
    config.data.metrics = ("accuracy", "f1")
    config.data.max_seq_length = 32
    return config


@pytest.fixture(scope="module")
def mrpc_run(pretrained_workdir, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("mrpc")
    return workdir, train.train_and_evaluate(
        _mrpc_config(pretrained_workdir), str(workdir), devices=ONE_DEVICE
    )


def test_classification_runs_scores_and_writes_its_workdir(mrpc_run):
    tmp_path, results = mrpc_run
    assert set(results["eval"]) == {"step", "accuracy", "f1"}
    assert results["eval"]["step"] == 2 and results["best"]["step"] in (1, 2)
    assert 0.0 <= results["eval"]["accuracy"] <= 1.0
    on_disk = json.loads((tmp_path / workdir_lib.RESULTS_FILE).read_text())
    assert on_disk["eval"] == results["eval"] and "task" not in on_disk  # task.json names it
    predictions = (tmp_path / "eval_predictions.jsonl").read_text().splitlines()
    assert len(predictions) == 3  # every dev example once, none of the padding
    assert {json.loads(line)["label"] for line in predictions} <= {"0", "1"}
    kind, task = workdir_lib.read_task(str(tmp_path))
    assert kind == "classification" and task["label_names"] == ["0", "1"]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["split"] for r in lines].count("eval") == 2  # after each epoch-sized step
    assert all(np.isfinite(r["loss"]) for r in lines if r["split"] == "train")
    assert checkpoint.latest_step(str(tmp_path)) == 2


def test_the_encoder_starts_from_the_checkpoint_in_any_layout(pretrained_workdir):
    config = _mrpc_config(pretrained_workdir)
    config.model.scan_layers = False  # the checkpoint has the scan layout
    run = train.build_run(config, "/nonexistent/not/written", devices=ONE_DEVICE)
    with jax.set_mesh(run.mesh):
        state = train.create_state(run)
    saved = np.asarray(
        checkpoint.restore_params(
            pretrained_workdir,
            {
                "bert": {
                    "encoder": {
                        "layer": {
                            "intermediate": {
                                "kernel": jax.ShapeDtypeStruct(
                                    (2, 64, 128),
                                    np.float32,
                                    sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]),
                                )
                            }
                        }
                    }
                }
            },
        )[0]["bert"]["encoder"]["layer"]["intermediate"]["kernel"]
    )
    encoder = state.params["bert"]["encoder"]
    for i in range(2):
        np.testing.assert_array_equal(
            np.asarray(encoder[f"layer_{i}"]["intermediate"]["kernel"]), saved[i]
        )
    classifier = np.asarray(state.params["classifier"]["kernel"])
    assert classifier.shape == (64, 2) and 0 < classifier.std() < 0.05

    config.random_init = True
    run = train.build_run(config, "/nonexistent/not/written", devices=ONE_DEVICE)
    with jax.set_mesh(run.mesh):
        fresh = train.create_state(run)
    assert not np.array_equal(
        np.asarray(fresh.params["bert"]["encoder"]["layer_0"]["intermediate"]["kernel"]), saved[0]
    )


def test_resume_gives_the_uninterrupted_result(pretrained_workdir, mrpc_run, tmp_path):
    config = _mrpc_config(pretrained_workdir)
    _, straight = mrpc_run  # this config's run, uninterrupted
    train.train_and_evaluate(config, str(tmp_path / "resumed"), stop_after=1, devices=ONE_DEVICE)
    resumed = train.train_and_evaluate(config, str(tmp_path / "resumed"), devices=ONE_DEVICE)
    assert resumed["eval"] == straight["eval"]


def _packing_config(task, init_checkpoint):
    """A small run of `task` whose batches pack into fewer rows, without dropout."""
    if task == "classification":
        config = _mrpc_config(init_checkpoint)
        config.data.max_seq_length = 64  # room for two pairs a row
        # 16 examples a batch, 2 steps.
        config.train_batch_size = 16
        config.num_train_epochs = 8.0
    elif task == "tagging":
        config = _ner_config(init_checkpoint)  # 3 steps of 8 short sentences
    else:
        # 10 one-sentence contexts, 3 windows a row; 2 steps of 8.
        config = squad.get_config("v1.1")
        config.init_checkpoint = init_checkpoint
        config.train_batch_size = 8
        config.eval_batch_size = 8
        config.num_train_epochs = 1.6
        config.data.train_file = str(TESTDATA / "squad_short.json")
        config.data.eval_file = str(TESTDATA / "squad_short.json")
        config.data.max_seq_length = 64
        config.data.doc_stride = 16
        config.data.max_query_length = 16
    config.log_every_steps = 1  # every step's loss is compared
    config.model.hidden_dropout_prob = 0.0
    config.model.attention_probs_dropout_prob = 0.0
    return config


# What each task writes of its eval predictions.
PREDICTIONS = {
    "classification": "eval_predictions.jsonl",
    "tagging": "eval_predictions.jsonl",
    "squad": "predictions.json",
}


@pytest.mark.parametrize("task", ["classification", "tagging", "squad"])
def test_packed_batches_train_as_the_unpacked_ones(pretrained_workdir, tmp_path, task, request):
    # Without dropout a packed run computes what the unpacked one does, in fewer rows.
    losses, results = {}, {}
    for packed in (False, True):
        config = _packing_config(task, pretrained_workdir)
        config.data.pack_examples = packed
        workdir = tmp_path / f"packed_{packed}"
        run = train.build_run(config, str(workdir), devices=ONE_DEVICE)
        batch_size = config.train_batch_size
        batch = next(
            run.setup.data.train(
                batch_size=batch_size, process_index=0, process_count=1, seed=0
            ).as_numpy_iterator()
        )
        assert (batch["input_ids"].shape[0] < batch_size) == packed
        if task == "tagging" and packed:  # the module's tagging run is this one
            workdir, results[packed] = request.getfixturevalue("ner_run")
        else:
            results[packed] = train.train_and_evaluate(config, str(workdir), devices=ONE_DEVICE)
        lines = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
        losses[packed] = [(r["step"], r["loss"]) for r in lines if r["split"] == "train"]
        losses[packed, "predictions"] = (workdir / PREDICTIONS[task]).read_text()
    assert losses[True, "predictions"] == losses[False, "predictions"]
    assert results[True]["eval"] == pytest.approx(results[False]["eval"], rel=1e-5)
    assert len(losses[True]) == run.setup.objective.num_train_steps >= 2
    for (step, packed), (_, plain) in zip(losses[True], losses[False], strict=True):
        assert packed == pytest.approx(plain, rel=1e-4), step


def test_the_packing_benchmark_times_both_layouts(pretrained_workdir, tmp_path):
    config = _mrpc_config(pretrained_workdir)
    config.data.max_seq_length = 64
    config.train_batch_size = 16
    config.num_train_epochs = 8.0
    result = packed_step.measure(config, str(tmp_path), steps=1)
    packed, unpacked = result["packed"], result["unpacked"]
    assert packed["rows"] < unpacked["rows"] == 16
    # The same text in fewer rows.
    text = 1 - unpacked["padding_share"]
    assert 1 - packed["padding_share"] == pytest.approx(text * 16 / packed["rows"])
    assert result["speedup"] == pytest.approx(
        packed["useful_tokens_per_s"] / unpacked["useful_tokens_per_s"]
    )


def _ner_config(init_checkpoint):
    config = ner.get_config()
    config.init_checkpoint = init_checkpoint
    config.train_batch_size = 8
    config.eval_batch_size = 8
    config.num_train_epochs = 8.0
    config.data.train_file = str(TESTDATA / "ner_train.txt")
    config.data.eval_file = str(TESTDATA / "ner_dev.txt")
    config.data.max_seq_length = 32
    return config


@pytest.fixture(scope="module")
def ner_run(pretrained_workdir, tmp_path_factory):
    # Packed (the default), without dropout, every step logged: the packing test's packed
    # tagging run too.
    tmp_path = tmp_path_factory.mktemp("ner")
    config = _packing_config("tagging", pretrained_workdir)
    return tmp_path, train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)


def test_tagging_runs_and_scores_entities(ner_run):
    tmp_path, results = ner_run
    assert {"entity_f1", "entity_precision", "entity_recall"} <= set(results["eval"])
    _, task = workdir_lib.read_task(str(tmp_path))
    dev_sentences = sum(
        1 for block in (TESTDATA / "ner_dev.txt").read_text().split("\n\n") if block.strip()
    )
    predictions = (tmp_path / "eval_predictions.jsonl").read_text().splitlines()
    assert len(predictions) <= dev_sentences
    assert all(set(json.loads(p)["tags"]) <= set(task["label_names"]) for p in predictions)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"init_checkpoint": ""}, "config.init_checkpoint: fine-tuning needs"),
        ({"bogus_key": 1}, "unknown config key: config.bogus_key"),
        ({"train_batch_size": 0}, "config.train_batch_size=0: must be at least 1"),
        ({"num_train_epochs": 0.0}, "config.num_train_epochs=0.0"),
        ({"task": "summarize"}, "config.task='summarize'"),
        ({"data.max_seq_length": 512}, "config.data.max_seq_length=512 is above"),
        ({"optimizer.warmup_proportion": 1.5}, "warmup_proportion=1.5"),
        ({"num_train_epochs": 0.5}, "config.num_train_epochs=0.5,.* no global batch"),
    ],
)
def test_config_errors_name_the_key(pretrained_workdir, tmp_path, change, message):
    config = _mrpc_config(pretrained_workdir)
    for key, value in change.items():
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        train.build_run(config, str(tmp_path))


def test_shape_fields_of_the_checkpoint_cannot_change(pretrained_workdir, tmp_path):
    config = _mrpc_config(pretrained_workdir)
    with config.unlocked():
        config.model.hidden_size = 128
    with pytest.raises(ConfigError, match="config.model.hidden_size: not changeable"):
        train.build_run(config, str(tmp_path))


def test_a_workdir_tokenized_with_another_vocabulary_is_refused(pretrained_workdir, tmp_path):
    config = _mrpc_config(pretrained_workdir)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nother\n")
    with pytest.raises(checkpoint.CheckpointError, match="differs from config.init_checkpoint"):
        train.build_run(config, str(tmp_path))


@pytest.fixture(scope="module")
def squad_run(pretrained_workdir, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("squad")
    config = squad.get_config("v2.0")
    config.init_checkpoint = pretrained_workdir
    config.train_batch_size = 8
    config.eval_batch_size = 8
    config.num_train_epochs = 2.0
    config.data.train_file = str(TESTDATA / "squad_v2.0.json")
    config.data.eval_file = str(TESTDATA / "squad_v2.0.json")
    config.data.max_seq_length = 64
    config.data.doc_stride = 24
    config.data.max_query_length = 16
    return tmp_path, train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)


def test_squad_runs_decodes_and_writes_the_official_predictions(squad_run):
    tmp_path, results = squad_run
    assert {"exact_match", "f1"} <= set(results["eval"])
    # SQuAD 2.0: also the scores at the null threshold best on these questions, which
    # are at least those at the run's threshold (0.0).
    tuned = results["eval"]
    assert tuned["tuned_f1"] >= tuned["f1"] and tuned["tuned_exact_match"] >= tuned["exact_match"]
    assert math.isfinite(tuned["tuned_f1_threshold"])
    questions = [
        qa["id"]
        for article in json.loads((TESTDATA / "squad_v2.0.json").read_text())["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    assert sorted(predictions) == sorted(questions)
    assert sorted(json.loads((tmp_path / "null_odds.json").read_text())) == sorted(questions)


# ------------------------------------------------- restored fine-tuned workdirs


def test_a_restored_classifier_classifies_and_predict_writes_its_file(
    mrpc_run, tmp_path, monkeypatch, capsys
):
    workdir, _ = mrpc_run
    restored = bertjax.restore(str(workdir))
    out = bertjax.classify(restored, ["The train was late."], pairs=["The train was delayed."])
    assert out[0]["label"] in ("0", "1")
    assert sum(out[0]["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(
        ValueError, match="fill_mask needs a pretraining workdir; this is a classification workdir"
    ):
        bertjax.fill_mask(restored, "A [MASK].")
    with pytest.raises(ValueError, match="tag needs a tagging workdir"):
        bertjax.tag(restored, "John")

    # Without labels, in another format: predictions for every row, in order.
    rows = [
        {"#1 String": "The council met.", "#2 String": "The council gathered."},
        {"#1 String": "Shares rose.", "#2 String": "A bakery opened."},
    ]
    source = tmp_path / "new.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.setattr(progress, "EVERY_S", 0.0)  # a progress line at every batch
    written = predictions.predict(str(workdir), str(source), batch_size=1)
    told = capsys.readouterr().err
    assert f"predicting {source}: 1/2 batches (50%), " in told
    assert f"predicting {source}: finished in " in told
    lines = [json.loads(line) for line in pathlib.Path(written).read_text().splitlines()]
    assert len(lines) == 2
    expected = bertjax.classify(
        restored, [r["#1 String"] for r in rows], pairs=[r["#2 String"] for r in rows]
    )
    assert [line["label"] for line in lines] == [e["label"] for e in expected]


def test_the_eval_predictions_match_the_restored_model(mrpc_run):
    # The trainer's sharded predict step and the notebook helper agree on the dev set.
    workdir, _ = mrpc_run
    restored = bertjax.restore(str(workdir))
    dev = [line.split("\t") for line in (TESTDATA / "mrpc_dev.tsv").read_text().splitlines()[1:]]
    labels = [
        out["label"]
        for out in bertjax.classify(restored, [r[3] for r in dev], pairs=[r[4] for r in dev])
    ]
    written = (workdir / "eval_predictions.jsonl").read_text().splitlines()
    assert labels == [json.loads(line)["label"] for line in written]


def test_a_restored_tagger_tags_words(ner_run, tmp_path, monkeypatch, capsys):
    workdir, _ = ner_run
    restored = bertjax.restore(str(workdir))
    tagged = bertjax.tag(restored, "Anna visited Paris in June")
    assert [word for word, _ in tagged] == ["Anna", "visited", "Paris", "in", "June"]
    assert all(tag in restored.task.label_names for _, tag in tagged)
    source = tmp_path / "sentences.txt"
    source.write_text("Anna visited Paris\n\nBob stayed home today\n")
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    written = predictions.predict(str(workdir), str(source))
    assert f"predicting {source}: 1/2 sentences (50%)" in capsys.readouterr().err
    lines = [json.loads(line) for line in pathlib.Path(written).read_text().splitlines()]
    assert [len(line["tags"]) for line in lines] == [3, 4]


def test_a_restored_reader_answers_from_the_context(squad_run, tmp_path, monkeypatch, capsys):
    workdir, _ = squad_run
    restored = bertjax.restore(str(workdir))
    context = "The Great Wall was built over many centuries by several dynasties."
    out = bertjax.answer(restored, "Who built the wall?", context)
    assert out["text"] == "" or out["text"] in context
    assert out["nbest"] and 0.0 <= out["probability"] <= 1.0
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    source = TESTDATA / "squad_v1.1.json"
    written = predictions.predict(str(workdir), str(source), str(tmp_path), batch_size=1)
    assert re.search(
        rf"predicting {re.escape(str(source))}: 1/\d+ batches", capsys.readouterr().err
    )
    answers = json.loads((pathlib.Path(written) / "predictions.json").read_text())
    questions = [
        qa["id"]
        for article in json.loads((TESTDATA / "squad_v1.1.json").read_text())["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    assert sorted(answers) == sorted(questions)


def test_glue_from_tfds_end_to_end(pretrained_workdir, tmp_path):
    # tfds.testing.mock_data stands in for a prepared glue/stsb (no download here).
    config = glue.get_config("stsb")
    config.init_checkpoint = pretrained_workdir
    config.train_batch_size = 8
    config.eval_batch_size = 8
    config.num_train_epochs = 1.0
    config.data.max_seq_length = 32
    with tfds.testing.mock_data(num_examples=16):
        results = train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)
    assert set(results["eval"]) == {"step", "pearson", "spearman"}
    lines = (tmp_path / "eval_predictions.jsonl").read_text().splitlines()
    scores = [json.loads(line)["score"] for line in lines]
    assert len(scores) == 16


def test_retrieval_compiles_its_train_step_once_per_padded_length_it_meets(
    pretrained_workdir, tmp_path, caplog
):
    long = " ".join(["word"] * 40)
    rows = [(f"where is item {i}", f"item {i} is in the hall") for i in range(10)]
    rows += [("where is the long one", long)] * 2  # 3 batches an epoch: one without them
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("anchor\tpositive\n" + "".join(f"{q}\t{p}\n" for q, p in rows))
    config = retrieval.get_config()
    config.init_checkpoint = pretrained_workdir
    config.data.train_file = str(pairs)
    config.data.max_query_length, config.data.max_seq_length = 16, 64
    config.train_batch_size, config.num_train_epochs = 4, 3.0
    config.log_every_steps = 1
    with jax.log_compiles(True), caplog.at_level("WARNING", logger="jax._src.interpreters.pxla"):
        train.train_and_evaluate(config, str(tmp_path / "w"), devices=ONE_DEVICE)
    compiled = [
        r.getMessage() for r in caplog.records if "Compiling jit(train_step)" in r.getMessage()
    ]
    # Passages of 9 tokens pad to 16, of 42 to 64: two programs for 9 steps.
    assert len(compiled) == 2, compiled
    steps = [json.loads(line) for line in (tmp_path / "w" / "metrics.jsonl").open()]
    flops_per_second = {round(s["model_flops_per_second"] / s["steps_per_second"]) for s in steps}
    assert len([s for s in steps if s["split"] == "train"]) == 9
    assert len(flops_per_second) == 2  # each step's FLOPs at its own lengths
