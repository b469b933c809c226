"""bertjax.tasks.tagging as a Task: its config checks, the metric runs are ranked by, the
FLOPs count, its model, and the setup it builds from the small CoNLL files
(tests/testdata/finetune) on an init checkpoint that holds a description and no
parameters, with the entity scores of hand-made logits over its real eval batches."""

import dataclasses
import json

import numpy as np
import pytest
import support
from support import init_workdir

from bertjax import flops, tasks
from bertjax import workdir as workdir_lib
from bertjax.model import BertConfig, BertForTokenClassification
from bertjax.tasks import finetune, tagging
from bertjax.tasks.contract import Description, Initialization
from data_pipeline.errors import ConfigError
from experiments.finetune import ner

TASK = tagging.TASK
TESTDATA = support.TESTDATA / "finetune"
# What the init checkpoint's model_config.json says: L=1, H=16, A=2, I=32, V=8.
WORDS = ["vienna", "home", "."]
SAVED = init_workdir.model_config(WORDS)
# ner_train.txt's tags, sorted.
LABELS = ("B-LOC", "B-ORG", "B-PER", "I-ORG", "I-PER", "O")
# ner_dev.txt: "Oliveira visited Greenfield in Vienna ." and "Tomasz stayed home ."
DEV_TAGS = [["B-PER", "O", "B-ORG", "O", "B-LOC", "O"], ["B-PER", "O", "O", "O"]]


@pytest.fixture(scope="module")
def init_checkpoint(tmp_path_factory) -> str:
    """A pretraining workdir's description (model config, vocabulary, task.json) without a
    checkpoint: all a fine-tuning setup reads of it."""
    return init_workdir.write(tmp_path_factory.mktemp("init"), WORDS)


def ner_config(init_checkpoint, changes=()):
    """finetune_test.py's NER run: 3 train sentences x 8 epochs / 8 = 3 steps, 2 dev ones."""
    config = ner.get_config()
    config.init_checkpoint = init_checkpoint
    config.train_batch_size = 8
    config.eval_batch_size = 8
    config.num_train_epochs = 8.0
    config.data.train_file = str(TESTDATA / "ner_train.txt")
    config.data.eval_file = str(TESTDATA / "ner_dev.txt")
    config.data.max_seq_length = 32
    for key, value in dict(changes).items():
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        with node.unlocked():
            node[leaf] = value
    return config


def eval_outputs(setup, logits_of):
    """What an evaluation keeps of each eval batch, for logits `logits_of(batch)`."""
    batches = setup.data.eval(batch_size=8, process_index=0, process_count=1, seed=0)
    return [setup.evaluation.outputs(logits_of(b), b) for b in batches.as_numpy_iterator()]


def one_hot(ids):
    return np.eye(len(LABELS), dtype=np.float32)[ids]


@pytest.fixture(scope="module", params=[False, True], ids=["unpacked", "packed"])
def ner_setup(request, init_checkpoint, tmp_path_factory):
    config = ner_config(init_checkpoint, {"data.pack_examples": request.param})
    return config, TASK.setup(config, str(tmp_path_factory.mktemp("run")))


# ------------------------------------------------------------------------ check_config


def test_the_ner_config_passes_and_reads_no_data(init_checkpoint):
    TASK.check_config(ner_config(init_checkpoint))
    TASK.check_config(ner_config(init_checkpoint, {"data.train_file": "/absent/eng.train"}))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"init_checkpoint": ""}, "config.init_checkpoint: fine-tuning needs a pretraining"),
        ({"num_train_epochs": -1.0}, r"config.num_train_epochs=-1.0: must be above 0"),
        ({"eval_batch_size": 0}, "config.eval_batch_size=0: must be at least 1"),
        ({"bogus": 1}, "unknown config key: config.bogus"),
        (
            {"model.num_hidden_layers": 4},
            r"config.model.num_hidden_layers: not changeable when fine-tuning \(a shape",
        ),
        (
            {"data.tagging_scheme": "bio"},
            "config.data.tagging_scheme='bio': must be one of iob1, iob2, iobes, bilou",
        ),
        ({"data.tag_column": 0}, "config.data.tag_column=0: column 0 holds the word"),
        ({"data.source": "conll"}, "config.data.source='conll': must be one of files, tfds"),
        (
            {"data.label_names": ("O", "B-PER", "O")},
            r"config.data.label_names=\('O', 'B-PER', 'O'\): has duplicates",
        ),
        (
            {"data.source": "tfds", "data.label_names": ("O",)},
            "config.data.label_names=.*source='tfds' takes the ClassLabel names",
        ),
        (
            {"data.train_file": "", "data.eval_file": ""},
            "config.data.train_file='': source='files' needs train_file, eval_file or both",
        ),
        ({"data.max_seq_length": 2}, "config.data.max_seq_length=2: must be at least 3"),
        ({"data.tag_colum": 3}, "unknown config key: config.data.tag_colum; did you mean"),
    ],
)
def test_config_errors_name_the_option(init_checkpoint, changes, message):
    with pytest.raises(ConfigError, match=message):
        TASK.check_config(ner_config(init_checkpoint, changes))


# ------------------------------------------------------------------ what runs are ranked by


@pytest.mark.parametrize("scheme", ["iob1", "iob2", "bilou"])
def test_runs_are_ranked_by_entity_f1_higher_is_better(init_checkpoint, scheme):
    best = TASK.best_metric(ner_config(init_checkpoint, {"data.tagging_scheme": scheme}))
    assert (best.name, best.higher_is_better) == ("entity_f1", True)
    assert best.is_better(0.9, 0.8) and not best.is_better(0.8, 0.9)


# ------------------------------------------------------------------- FLOPs and the model

SMALL = BertConfig(
    num_hidden_layers=2,
    hidden_size=16,
    num_attention_heads=2,
    intermediate_size=32,
    vocab_size=40,
    max_position_embeddings=16,
)


def test_forward_flops_is_the_encoder_then_a_classifier_at_every_position():
    # A layer over 8 tokens: 4*8*16*16 + 8 * (4*16*16 + 4*8*16 + 4*16*32) = 36864;
    # a 5-way classifier at 8 positions: 8 * 2*16*5.
    row = dict.fromkeys(("input_ids", "input_mask", "segment_ids"), 8)
    counted = TASK.forward_flops(SMALL, row, Description(8, {}, num_labels=5))
    assert counted == 2 * 36864 + 1280 == 75008
    assert counted == flops.encoder_flops(SMALL, 8) + 8 * 2 * 16 * 5


def test_make_model_has_one_output_per_label_of_the_description():
    model = TASK.make_model(SMALL, Description(8, {}, num_labels=6, label_names=LABELS))
    assert isinstance(model, BertForTokenClassification)
    assert (model.config, model.num_labels) == (SMALL, 6)


def test_the_task_table_holds_this_task():
    assert tasks.get("tagging") is TASK
    assert TASK.predict_file is tagging.predict_file and TASK.report is finetune.report


# ------------------------------------------------------------------------------- setup


def test_setup_reads_the_tag_set_and_counts_the_steps(ner_setup, init_checkpoint):
    config, setup = ner_setup
    assert setup.model.config == dataclasses.replace(
        SAVED, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1
    )
    assert isinstance(setup.model.module, BertForTokenClassification)
    assert setup.model.module.num_labels == 6
    # Packed or not, a token classifier takes no [CLS] positions.
    assert setup.model.inputs == dict.fromkeys(("input_ids", "input_mask", "segment_ids"), 32)
    assert setup.objective.features[-3:] == ("example_weight", "label_ids", "label_weights")
    assert setup.objective.num_train_steps == 3  # 3 sentences x 8 epochs / 8
    assert setup.description.label_names == LABELS
    assert setup.description.metrics == ("entity_f1", "entity_precision", "entity_recall")
    assert setup.description.data == config.data.to_dict()
    assert setup.init == Initialization(init_checkpoint, ("bert",), scan_layers=False)


def test_the_gold_tags_score_one(ner_setup):
    _, setup = ner_setup
    values, predicted = setup.evaluation.score(
        eval_outputs(setup, lambda b: one_hot(b["label_ids"]))
    )
    assert values == {"entity_f1": 1.0, "entity_precision": 1.0, "entity_recall": 1.0}
    assert predicted == DEV_TAGS


def test_tagging_every_word_b_loc_finds_one_of_four_entities(ner_setup):
    _, setup = ner_setup
    values, predicted = setup.evaluation.score(
        eval_outputs(setup, lambda b: one_hot(np.zeros_like(b["label_ids"])))
    )
    # 10 one-word LOC entities guessed, Vienna right; 4 gold entities.
    assert values == pytest.approx(
        {"entity_precision": 0.1, "entity_recall": 0.25, "entity_f1": 2 * 0.025 / 0.35}
    )
    assert predicted == [["B-LOC"] * 6, ["B-LOC"] * 4]


def test_tagging_nothing_scores_zero(ner_setup):
    _, setup = ner_setup
    values, _ = setup.evaluation.score(
        eval_outputs(setup, lambda b: one_hot(np.full_like(b["label_ids"], LABELS.index("O"))))
    )
    assert values == {"entity_f1": 0.0, "entity_precision": 0.0, "entity_recall": 0.0}


def test_eval_predictions_are_written_as_tags(ner_setup, tmp_path):
    _, setup = ner_setup
    setup.evaluation.write_predictions(DEV_TAGS, str(tmp_path))
    lines = (tmp_path / workdir_lib.EVAL_PREDICTIONS_FILE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"tags": tags} for tags in DEV_TAGS]


def test_unpacked_eval_batches_carry_the_word_bookkeeping(init_checkpoint, tmp_path):
    setup = TASK.setup(ner_config(init_checkpoint, {"data.pack_examples": False}), str(tmp_path))
    assert TASK.batch_shapes(setup, "eval", 8) == {
        "input_ids": ((8, 32), np.int32),
        "input_mask": ((8, 32), np.int32),
        "segment_ids": ((8, 32), np.int32),
        "label_ids": ((8, 32), np.int32),
        "label_weights": ((8, 32), np.float32),
        "word_index": ((8, 32), np.int32),
        "sentence_id": ((8,), np.int32),
        "example_weight": ((8,), np.float32),
    }
