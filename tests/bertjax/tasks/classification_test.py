"""bertjax.tasks.classification as a Task: its config checks, the metric runs are ranked by,
the FLOPs count, its model, and the setup it builds from the small MRPC-format files
(tests/testdata/finetune) on an init checkpoint that holds a description and no
parameters, with the scores and predictions of hand-made logits."""

import dataclasses
import json

import numpy as np
import pytest
import support
from support import init_workdir

from bertjax import flops, tasks, train
from bertjax import workdir as workdir_lib
from bertjax.model import BertConfig, BertForSequenceClassification
from bertjax.tasks import classification, finetune
from bertjax.tasks.contract import Description, Initialization
from data_pipeline.errors import ConfigError
from experiments.finetune import classify

TASK = classification.TASK
TESTDATA = support.TESTDATA / "finetune"
# What the init checkpoint's model_config.json says: L=1, H=16, A=2, I=32, V=9.
WORDS = ["the", "a", "council", "train"]
SAVED = init_workdir.model_config(WORDS)


@pytest.fixture(scope="module")
def init_checkpoint(tmp_path_factory) -> str:
    """A pretraining workdir's description (model config, vocabulary, task.json) without a
    checkpoint: all a fine-tuning setup reads of it."""
    return init_workdir.write(tmp_path_factory.mktemp("init"), WORDS)


def mrpc_config(init_checkpoint, changes=()):
    """finetune_test.py's MRPC run: 4 train pairs x 4 epochs / 8 = 2 steps, 3 dev pairs."""
    config = classify.get_config()
    config.init_checkpoint = init_checkpoint
    config.train_batch_size = 8
    config.eval_batch_size = 8
    config.num_train_epochs = 4.0
    config.data.train_file = str(TESTDATA / "mrpc_train.tsv")
    config.data.eval_file = str(TESTDATA / "mrpc_dev.tsv")
    config.data.text_a = "#1 String"
    config.data.text_b = "#2 String"
    config.data.label = "Quality"
    config.data.metrics = ("accuracy", "f1")
    config.data.max_seq_length = 32
    for key, value in dict(changes).items():
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        with node.unlocked():
            node[leaf] = value
    return config


@pytest.fixture(scope="module")
def mrpc_setup(init_checkpoint, tmp_path_factory):
    config = mrpc_config(init_checkpoint)
    return config, TASK.setup(config, str(tmp_path_factory.mktemp("run")))


# ------------------------------------------------------------------------ check_config


def test_the_mrpc_config_passes_and_reads_no_data(init_checkpoint):
    TASK.check_config(mrpc_config(init_checkpoint))
    # A sweep checks its trials before any data exists.
    TASK.check_config(mrpc_config(init_checkpoint, {"data.train_file": "/absent/train.tsv"}))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"init_checkpoint": ""}, "config.init_checkpoint: fine-tuning needs a pretraining"),
        ({"num_train_epochs": 0.0}, r"config.num_train_epochs=0.0: must be above 0"),
        ({"train_batch_size": 0}, "config.train_batch_size=0: must be at least 1"),
        ({"bogus_key": 1}, "unknown config key: config.bogus_key"),
        (
            {"model.hidden_size": 128},
            r"config.model.hidden_size: not changeable when fine-tuning \(a shape of the "
            r"checkpoint's\); use one of hidden_dropout_prob, ",
        ),
        (
            {"model.hidden_act": "relu"},
            "config.model.hidden_act: not changeable when fine-tuning; use one of",
        ),
        (
            {"optimizer.warmup_proportion": 1.5},
            r"config.optimizer.warmup_proportion=1.5: must be in \[0, 1\]",
        ),
        ({"optimizer.momentum": 0.9}, r"unknown optimizer option\(s\): config.optimizer.momentum"),
        ({"data.txt_a": "x"}, "unknown config key: config.data.txt_a"),
        ({"data.text_a": ""}, "config.data.text_a='': must name a column"),
        (
            {"data.metrics": ("accuracy", "bleu")},
            r"config.data.metrics=\('accuracy', 'bleu'\): 'bleu' is not one of accuracy, f1",
        ),
        (
            {"data.metrics": ("pearson",)},
            "config.data.metrics=.*pearson and spearman are for is_regression=True",
        ),
        (
            {"data.train_file": "train.txt"},
            "config.data.train_file='train.txt': the extension must be one of",
        ),
        (
            {"data.source": "glue", "data.glue_task": "mnlii"},
            "config.data.glue_task='mnlii': must be one of cola, sst2",
        ),
        (
            {"data.label_names": ("yes",), "data.train_file": ""},
            r"config.data.label_names=\('yes',\): classification needs at least two labels",
        ),
    ],
)
def test_config_errors_name_the_option(init_checkpoint, changes, message):
    with pytest.raises(ConfigError, match=message):
        TASK.check_config(mrpc_config(init_checkpoint, changes))


def test_an_init_checkpoint_that_is_no_workdir_is_named(tmp_path):
    with pytest.raises(
        workdir_lib.CheckpointError,
        match=f"config.init_checkpoint='{tmp_path}': not a bertjax workdir \\(no model_config.json",
    ):
        TASK.check_config(mrpc_config(str(tmp_path)))


def test_an_init_checkpoint_without_parameters_stops_the_run_before_it_starts(
    init_checkpoint, tmp_path
):
    runs = tmp_path / "runs"
    with pytest.raises(workdir_lib.CheckpointError) as caught:
        train.train_and_evaluate(mrpc_config(init_checkpoint), str(runs / "mrpc"))
    assert str(caught.value) == (
        f"config.init_checkpoint={init_checkpoint!r}: no checkpoint under {init_checkpoint} "
        "to take the parameters from"
    )
    assert not runs.exists()  # nor its lock, config.json or event log


# ------------------------------------------------------------------ what runs are ranked by


@pytest.mark.parametrize(
    "data, metric",
    [
        ({}, "accuracy"),
        ({"metrics": ("f1", "accuracy")}, "f1"),
        ({"metrics": ("matthews_corrcoef",)}, "matthews_corrcoef"),
        ({"is_regression": True}, "pearson"),
        ({"is_regression": True, "metrics": ("spearman",)}, "spearman"),
        ({"source": "glue", "glue_task": "cola", "train_file": ""}, "matthews_corrcoef"),
        ({"source": "glue", "glue_task": "mrpc", "train_file": ""}, "accuracy"),
        ({"source": "glue", "glue_task": "stsb", "train_file": ""}, "pearson"),
    ],
)
def test_the_best_metric_is_the_first_configured_and_higher_is_better(data, metric):
    config = classify.get_config()
    config.data.train_file = "train.tsv"
    config.data.update(data)
    best = TASK.best_metric(config)
    assert best.name == metric and best.higher_is_better is True
    assert best.is_better(0.6, 0.5) and not best.is_better(0.5, 0.6)


# ------------------------------------------------------------------- FLOPs and the model

# L=2, H=16, A=2, I=32: a layer over 8 tokens is 4*8*16*16 + 8 * (4*16*16 + 4*8*16 +
# 4*16*32) = 36864 FLOPs; the pooler is 2*16*16 and a 3-way classifier 2*16*3.
SMALL = BertConfig(
    num_hidden_layers=2,
    hidden_size=16,
    num_attention_heads=2,
    intermediate_size=32,
    vocab_size=40,
    max_position_embeddings=16,
)
ROW = dict.fromkeys(("input_ids", "input_mask", "segment_ids"), 8)


def test_forward_flops_is_the_encoder_then_the_pooler_and_classifier():
    counted = TASK.forward_flops(SMALL, ROW, Description(8, {}, num_labels=3))
    assert counted == 2 * 36864 + 512 + 96 == 74336
    assert counted == flops.encoder_flops(SMALL, 8) + flops.pooler_flops(SMALL) + 2 * 16 * 3


def test_a_packed_row_counts_the_pooler_and_classifier_once_per_example():
    inputs = {**ROW, "cls_positions": 2}
    assert TASK.forward_flops(SMALL, inputs, Description(8, {}, num_labels=3)) == 73728 + 2 * 608


def test_make_model_has_one_output_per_label_of_the_description():
    model = TASK.make_model(SMALL, Description(8, {}, num_labels=3, label_names=("a", "b", "c")))
    assert isinstance(model, BertForSequenceClassification)
    assert (model.config, model.num_labels) == (SMALL, 3)


def test_the_task_table_holds_this_task():
    assert tasks.get("classification") is TASK
    assert TASK.predict_file is classification.predict_file
    assert TASK.batch_shapes is not None and TASK.report is finetune.report


# ------------------------------------------------------------------------------- setup


def test_setup_reads_the_labels_and_counts_the_steps(mrpc_setup, init_checkpoint):
    config, setup = mrpc_setup
    # The checkpoint's architecture with the fine-tuning config's dropout.
    assert setup.model.config == dataclasses.replace(
        SAVED, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1
    )
    assert isinstance(setup.model.module, BertForSequenceClassification)
    assert setup.model.module.num_labels == 2
    # Packed (the default): a pair of 32 tokens has a row to itself, one [CLS] a row.
    assert setup.model.inputs == {
        "input_ids": 32,
        "input_mask": 32,
        "segment_ids": 32,
        "cls_positions": 1,
    }
    assert setup.objective.num_train_steps == 2  # 4 pairs x 4 epochs / 8
    assert setup.objective.optimizer["warmup_steps"] == 0  # 10% of 2 steps
    assert setup.evaluation.every_steps == 1 and setup.evaluation.checkpoint_each is True
    assert setup.description.label_names == ("0", "1")
    assert setup.description.metrics == ("accuracy", "f1")
    assert setup.description.num_labels == 2
    assert setup.description.init_checkpoint == init_checkpoint
    assert setup.description.data == config.data.to_dict()
    assert setup.init == Initialization(init_checkpoint, ("bert",), scan_layers=False)
    assert setup.data.vocab_file.endswith("/w/vocab.txt")


def test_scores_are_the_configured_metrics_over_the_real_examples(mrpc_setup):
    _, setup = mrpc_setup
    # The dev labels are 1, 0, 1; the fourth row pads the batch (weight 0).
    weights = {"example_weight": np.array([1.0, 1.0, 1.0, 0.0], np.float32)}
    always_one = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    values, predictions = setup.evaluation.score([(always_one, weights)])
    assert values == pytest.approx({"accuracy": 2 / 3, "f1": 0.8})  # P 2/3, R 1
    np.testing.assert_array_equal(predictions, [1, 1, 1])
    # Two batches are scored as one split; the padding row's logits do not count.
    right = np.array([[0.0, 1.0], [1.0, 0.0]])
    rest = np.array([[0.0, 1.0], [9.0, 0.0]])
    split = [
        (right, {"example_weight": np.ones(2, np.float32)}),
        (rest, {"example_weight": np.array([1.0, 0.0], np.float32)}),
    ]
    values, predictions = setup.evaluation.score(split)
    assert values == {"accuracy": 1.0, "f1": 1.0}
    np.testing.assert_array_equal(predictions, [1, 0, 1])


def test_eval_predictions_are_written_as_label_names(mrpc_setup, tmp_path):
    _, setup = mrpc_setup
    setup.evaluation.write_predictions(np.array([1, 0, 1]), str(tmp_path))
    lines = (tmp_path / workdir_lib.EVAL_PREDICTIONS_FILE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"label": "1"}, {"label": "0"}, {"label": "1"}]


def test_unpacked_batches_have_one_example_a_row(init_checkpoint, tmp_path):
    config = mrpc_config(init_checkpoint, {"data.pack_examples": False})
    setup = TASK.setup(config, str(tmp_path))
    assert "cls_positions" not in setup.model.inputs
    assert TASK.batch_shapes(setup, "eval", 8) == {
        "input_ids": ((8, 32), np.int32),
        "input_mask": ((8, 32), np.int32),
        "segment_ids": ((8, 32), np.int32),
        "label": ((8,), np.int32),
        "example_weight": ((8,), np.float32),
    }


def test_regression_scores_its_one_output_and_writes_scores(init_checkpoint, tmp_path):
    for split, rows in (
        ("train", [("a", 0.5), ("b", 1.5), ("c", 4.0)]),
        ("dev", [("x", 1.0), ("y", 2.0), ("z", 3.0)]),
    ):
        lines = ["text\tscore", *(f"{text}\t{score}" for text, score in rows)]
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    config = mrpc_config(
        init_checkpoint,
        {
            "data.train_file": str(tmp_path / "train.tsv"),
            "data.eval_file": str(tmp_path / "dev.tsv"),
            "data.text_a": "text",
            "data.text_b": "",
            "data.label": "score",
            "data.is_regression": True,
            "data.metrics": (),
            "num_train_epochs": 8.0,  # 3 examples x 8 / 8 = 3 steps
        },
    )
    setup = TASK.setup(config, str(tmp_path / "run"))
    assert (setup.description.num_labels, setup.description.label_names) == (1, ())
    assert setup.description.metrics == ("pearson", "spearman")
    assert setup.objective.num_train_steps == 3
    outputs = np.array([[2.0], [4.0], [6.0], [100.0]])  # linear in the labels 1, 2, 3
    weights = {"example_weight": np.array([1.0, 1.0, 1.0, 0.0], np.float32)}
    values, predictions = setup.evaluation.score([(outputs, weights)])
    assert values == pytest.approx({"pearson": 1.0, "spearman": 1.0})
    np.testing.assert_array_equal(predictions, [2.0, 4.0, 6.0])
    setup.evaluation.write_predictions(predictions, str(tmp_path))
    written = (tmp_path / workdir_lib.EVAL_PREDICTIONS_FILE).read_text().splitlines()
    assert [json.loads(line) for line in written] == [
        {"score": 2.0},
        {"score": 4.0},
        {"score": 6.0},
    ]
