"""A task defined entirely here, sentence-length regression, trained by the one training loop.

It is what docs/finetuning.md's "Adding a task" section describes: a `Task` of plain
functions, handed to `train.train_and_evaluate` or named by its import path
(`config.task = "custom_task_test:SENTENCE_LENGTH"`); nothing in bertjax/ knows it.
"""

import dataclasses
import functools
import json
import os
import pathlib
import subprocess
import sys
from pydoc_data.topics import topics

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from support import REPO

from bertjax import checkpoint, flops, inference, train
from bertjax import model as model_lib
from bertjax.model import BertForSequenceClassification
from bertjax.tasks import scores
from bertjax.tasks.contract import (
    Data,
    Description,
    Evaluation,
    Model,
    Objective,
    Setup,
    Task,
    dataset_batch_shapes,
)
from data_pipeline import config as data_config_lib
from data_pipeline.tokenizer import make_tokenizer

LENGTH = 32


def _sentences() -> tuple[list[str], list[str]]:
    """Short sentences of the interpreter's docs; every fifth one held out."""
    lines = [
        line.strip()
        for text in topics.values()
        for line in text.splitlines()
        if 3 <= len(line.split()) <= 20 and line.strip().endswith(".")
    ]
    lines = sorted(set(lines))[:1500]
    return [s for i, s in enumerate(lines) if i % 5], lines[::5]


# The target is the number of words, centred and scaled near the training set's mean
# and spread so that a fresh head, which predicts about 0, starts at the baseline.
CENTRE, SCALE = 10.0, 4.0


def _features(sentences, tokenizer) -> dict[str, np.ndarray]:
    vocab = tokenizer.vocab
    pieces = tokenizer.tokenize(tf.constant(sentences)).to_list()
    ids = np.zeros((len(sentences), LENGTH), np.int32)
    for row, tokens in enumerate(pieces):
        row_ids = [vocab.cls_id, *tokens[: LENGTH - 2], vocab.sep_id]
        ids[row, : len(row_ids)] = row_ids
    return {
        "input_ids": ids,
        "input_mask": (ids > 0).astype(np.int32),
        "segment_ids": np.zeros_like(ids),
        "length": (np.array([len(s.split()) for s in sentences], np.float32) - CENTRE) / SCALE,
    }


def _dataset(features, *, training, batch_size, process_index, process_count, seed):
    dataset = tf.data.Dataset.from_tensor_slices(features)
    dataset = dataset.shard(process_count, process_index)
    if training:
        dataset = dataset.repeat().shuffle(1000, seed=seed)
    return dataset.batch(batch_size, drop_remainder=True)


def _sums(outputs, batch):
    error = outputs[:, 0] - batch["length"]
    return {
        "squared_error": jnp.sum(error**2),
        "absolute_error": jnp.sum(jnp.abs(error)) * SCALE,  # in words
        "count": jnp.asarray(error.shape[0], jnp.float32),
    }


def _summarize(sums) -> dict[str, float]:
    count = max(float(sums["count"]), 1.0)
    return {
        "loss": float(sums["squared_error"]) / count,
        "mean_absolute_error": float(sums["absolute_error"]) / count,
    }


def _score(outputs: list):
    total = {key: sum(float(o[key]) for o in outputs) for key in outputs[0]}
    return _summarize(total), None


def setup(config, workdir: str) -> Setup:
    del workdir  # nothing to resume from but the checkpoints
    model_config = model_lib.from_config(config.model)
    data = data_config_lib.from_config(config.data)
    tokenizer = make_tokenizer(data, data.vocab_file)
    train_texts, eval_texts = _sentences()
    train_features = _features(train_texts, tokenizer)
    return Setup(
        model=Model(
            model_config,
            BertForSequenceClassification(model_config, 1),
            dict.fromkeys(("input_ids", "input_mask", "segment_ids"), LENGTH),
        ),
        objective=Objective(
            num_train_steps=config.num_train_steps,
            optimizer=config.optimizer,
            features=("input_ids", "input_mask", "segment_ids", "length"),
            sums=_sums,
            denominators=lambda batch: jnp.asarray(batch["length"].shape[0], jnp.float32),
            loss=lambda sums, count: sums["squared_error"] / count,
            summarize=_summarize,
            console=(("mean_absolute_error", "mae"),),
        ),
        data=Data(
            vocab_file=data.vocab_file,
            train=functools.partial(_dataset, train_features, training=True),
            eval=functools.partial(_dataset, _features(eval_texts, tokenizer), training=False),
        ),
        evaluation=Evaluation(
            every_steps=config.eval_every_steps,
            num_steps=0,
            checkpoint_each=False,
            outputs=_sums,
            score=_score,
        ),
        description=Description(max_seq_length=LENGTH, tokenizer_data=config.data.to_dict()),
    )


def _forward_flops(c, inputs, description) -> float:
    """The encoder, the pooler and one output at [CLS]."""
    del description
    return flops.encoder_flops(c, inputs["input_ids"]) + flops.pooler_flops(c) + 2 * c.hidden_size


SENTENCE_LENGTH = Task(
    name="sentence_length",
    setup=setup,
    make_model=lambda model_config, description: BertForSequenceClassification(model_config, 1),
    best_metric=lambda config: scores.Metric("mean_absolute_error", None, higher_is_better=False),
    forward_flops=_forward_flops,
    batch_shapes=dataset_batch_shapes,
    check_config=lambda config: None,
)


@pytest.fixture
def config(make_small_config):
    config = make_small_config()
    config.num_train_steps = 150
    config.train_batch_size = 16
    config.eval_batch_size = 16
    config.eval_every_steps = 50
    config.checkpoint_every_steps = 50
    config.log_every_steps = 50
    config.data.max_seq_length = LENGTH
    config.model.hidden_dropout_prob = 0.0
    config.model.attention_probs_dropout_prob = 0.0
    config.optimizer.learning_rate = 2e-3
    config.optimizer.warmup_steps = 10
    return config


@pytest.mark.integration
def test_a_task_defined_outside_bertjax_trains_through_the_loop(config, tmp_path):
    workdir = tmp_path / "length"
    # One device: the loop's sharding is the sharding tests' concern.
    results = train.train_and_evaluate(
        config, str(workdir), task=SENTENCE_LENGTH, devices=jax.devices()[:1]
    )

    evals = [
        json.loads(line)
        for line in (workdir / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["split"] == "eval"
    ]
    assert [e["step"] for e in evals] == [50, 100, 150]
    # Predicting the mean length of the training sentences: what learning nothing scores.
    train_texts, eval_texts = _sentences()
    mean = np.mean([len(s.split()) for s in train_texts])
    baseline = np.mean([abs(len(s.split()) - mean) for s in eval_texts])
    final = results["eval"]["mean_absolute_error"]
    print(f"\nheld-out mean absolute error {final:.2f} words (predicting the mean: {baseline:.2f})")
    assert final < 0.6 * baseline
    assert results["best"]["mean_absolute_error"] <= final
    assert results["best_metric"] == {"name": "mean_absolute_error", "higher_is_better": False}

    # The loop wrote the workdir as it does for every task, and counted the task's FLOPs.
    written = json.loads((workdir / "task.json").read_text())
    assert written["kind"] == "sentence_length" and written["max_seq_length"] == LENGTH
    train_lines = [
        json.loads(line)
        for line in (workdir / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["split"] == "train"
    ]
    per_step = (
        3
        * config.train_batch_size
        * _forward_flops(model_lib.from_config(config.model), {"input_ids": LENGTH}, None)
    )
    for line in train_lines:
        assert line["model_flops_per_second"] == pytest.approx(line["steps_per_second"] * per_step)
        assert 0 < line["mfu"] <= 1
    assert json.loads((workdir / "results.json").read_text())["eval"] == results["eval"]
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir())[-1] == "150"


SWEEP_EXPERIMENT = """\
from experiments.pretrain import tiny_cpu


def get_config():
    c = tiny_cpu.get_config()
    c.task = "custom_task_test:SENTENCE_LENGTH"
    c.num_train_steps = 40
    c.train_batch_size = 16
    c.eval_batch_size = 16
    c.eval_every_steps = 40
    c.checkpoint_every_steps = 40
    c.log_every_steps = 20
    c.optimizer.warmup_steps = 5
    c.data.vocab_file = {vocab!r}
    c.data.vocab_size = 30522
    c.data.max_seq_length = {length}
    c.model.hidden_size = 64
    c.model.num_attention_heads = 2
    c.model.intermediate_size = 128
    c.model.max_position_embeddings = 64
    c.model.hidden_dropout_prob = 0.0
    c.model.attention_probs_dropout_prob = 0.0
    return c


def get_hyper(hyper):
    return hyper.sweep("config.optimizer.learning_rate", [1e-7, 2e-3])
"""


@pytest.mark.integration
def test_a_task_named_by_its_import_path_sweeps_and_restores(tmp_path, bert_tokenizer_json):
    experiment = tmp_path / "length_sweep.py"
    experiment.write_text(SWEEP_EXPERIMENT.format(vocab=bert_tokenizer_json, length=LENGTH))
    # This file's folder on the path, as a user's own package would be.
    here = str(pathlib.Path(__file__).resolve().parent)
    path = [here, str(REPO / "tests"), str(REPO)]  # the module imports tests/support
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    sweep_dir = tmp_path / "sweep"
    result = subprocess.run(
        [sys.executable, "-m", "bertjax.sweep", "run", "--config", str(experiment)]
        + ["--sweep_dir", str(sweep_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    finals = {
        workdir.name: json.loads((workdir / "results.json").read_text())["eval"]
        for workdir in (sweep_dir / "trials").iterdir()
        if workdir.is_dir()
    }
    assert len(finals) == 2
    # The task's metric, lower is better: the trial that learned is the best one.
    best = min(finals, key=lambda name: finals[name]["mean_absolute_error"])
    assert "0.002" in best, finals
    report = subprocess.run(
        [sys.executable, "-m", "bertjax.sweep", "report", str(sweep_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    (best_line,) = [line for line in report.stdout.splitlines() if line.startswith("best: ")]
    assert best_line.endswith(best) and "mean_absolute_error" in best_line

    # The workdir names the task by its path: restore finds the task's model again.
    workdir = sweep_dir / "trials" / best
    assert json.loads((workdir / "task.json").read_text())["kind"] == (
        "custom_task_test:SENTENCE_LENGTH"
    )
    restored = inference.restore(str(workdir))
    assert restored.kind == "custom_task_test:SENTENCE_LENGTH"
    assert isinstance(restored.model, BertForSequenceClassification)


def test_a_task_path_that_names_no_task_is_a_config_error():
    from bertjax import tasks

    with pytest.raises(tasks.ConfigError, match="cannot import no_such_module"):
        tasks.get("no_such_module:TASK")
    with pytest.raises(tasks.ConfigError, match="has no Task called 'LENGTH'"):
        tasks.get("custom_task_test:LENGTH")


@pytest.mark.tpu_compile
def test_a_task_defined_outside_bertjax_compiles_ahead_of_time(config):
    from bertjax.tpu import compile_report, slices

    config.eval_batch_size = 16
    report = compile_report.compile_report(config, slices.parse("v5e-8"), task=SENTENCE_LENGTH)
    assert report["fits"] and report["eval_fits"]
    assert report["seq_len"] == LENGTH
    per_step = (
        3 * 16 * _forward_flops(model_lib.from_config(config.model), {"input_ids": LENGTH}, None)
    )
    assert report["analytic_flops_per_step"] == per_step
    # The compiler's count is the task's matmuls plus what is not a matmul (at this toy
    # width, mostly the optimizer's update of the embedding).
    assert report["xla_flops_per_step"] > per_step


def _poisoned(first: int, count: int) -> Task:
    """The task with targets of NaN in the batches of steps first .. first + count - 1."""

    def poisoned_setup(config, workdir):
        setup_ = setup(config, workdir)

        def train_dataset(**host):
            def poison(index, batch):
                bad = (index >= first - 1) & (index < first - 1 + count)
                return {**batch, "length": tf.where(bad, np.float32("nan"), batch["length"])}

            return setup_.data.train(**host).enumerate().map(poison)

        return dataclasses.replace(
            setup_, data=dataclasses.replace(setup_.data, train=train_dataset)
        )

    return dataclasses.replace(SENTENCE_LENGTH, setup=poisoned_setup)


@pytest.mark.integration
def test_non_finite_steps_are_skipped_up_to_a_limit(config, tmp_path):
    config.num_train_steps = 6
    config.log_every_steps = 1
    config.eval_every_steps = 0
    config.checkpoint_every_steps = 1
    config.checkpoints_to_keep = 10
    config.optimizer.warmup_steps = 1
    config.optimizer.skip_non_finite_steps = 2
    workdir = str(tmp_path / "skipped")
    # Steps 3, 4 and 5 see NaN targets: two are skipped, the third stops the run.
    with pytest.raises(train.TrainingError, match="3 steps in a row with non-finite gradients"):
        train.train_and_evaluate(config, workdir, task=_poisoned(3, 3), devices=jax.devices()[:1])

    with open(f"{workdir}/metrics.jsonl", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    assert [line["skipped_steps"] for line in lines] == [0, 0, 1, 2]
    assert all(np.isfinite(line["loss"]) for line in lines)
    assert checkpoint.latest_step(workdir) == 4  # nothing after the last skipped step
    # Steps 3 and 4 left the parameters as step 2 had them.
    run = train.build_run(config, workdir, task=SENTENCE_LENGTH, devices=jax.devices()[:1])
    manager = checkpoint.make_manager(workdir, max_to_keep=10)
    params = [checkpoint.restore(manager, step, run.abstract_state)[0].params for step in (2, 4)]
    manager.close()
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), *params)
    assert all(jax.tree.leaves(same))
