"""bertjax.tasks.pretraining as a Task: its config checks, best metric, FLOPs count, batch
shapes, the setup it builds from a placeholder vocabulary (no corpus read), and the
objective's and evaluation's arithmetic."""

import dataclasses
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

from bertjax import flops, tasks
from bertjax import model as model_lib
from bertjax import workdir as workdir_lib
from bertjax.tasks import pretraining
from bertjax.tasks.contract import Description, Initialization
from bertjax.workdir import CheckpointError
from data_pipeline import config as data_config_lib
from data_pipeline import schema
from data_pipeline.errors import ConfigError, UserError
from data_pipeline.vocab import VocabError, write_placeholder_vocab
from experiments.pretrain import tiny_cpu

TASK = pretraining.TASK


# A pretraining workdir's task.json description, of a model with the NSP head.
WITH_NSP = Description(8, {"next_sentence_prediction": True})


def tiny_config(**changes):
    """experiments/pretrain/tiny_cpu.py's config with `changes` ({"data.max_seq_length": 64})."""
    config = tiny_cpu.get_config()
    for key, value in changes.items():
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    return config


def built(tmp_path, **changes):
    """(config, setup) of tiny_cpu with a placeholder vocabulary: no corpus is read."""
    config = TASK.without_data(tiny_config(**changes), str(tmp_path / "aside"))
    return config, TASK.setup(config, str(tmp_path / "run"))


@pytest.fixture(autouse=True)
def aside(tmp_path):
    (tmp_path / "aside").mkdir()


def describe_workdir(path, model_config, vocab_size=4096) -> str:
    """A workdir holding a run's description (model_config.json, task.json, vocab.txt) of
    `model_config`, as a pretraining run or the converter writes it; no checkpoint."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    vocab = write_placeholder_vocab(os.path.join(os.path.dirname(path), "v.txt"), vocab_size)
    config = tiny_config()
    workdir_lib.write_run_description(
        str(path),
        config,
        model_config,
        vocab,
        kind="pretraining",
        description=pretraining.describe(config.data).to_json(),
    )
    return str(path)


# ------------------------------------------------------------------------ check_config


def test_the_tiny_cpu_config_passes_with_or_without_a_task_key():
    config = tiny_config()
    assert "task" not in config
    TASK.check_config(config)
    config.task = "pretraining"
    TASK.check_config(config)
    TASK.check_config(tiny_config(num_eval_steps=0, eval_every_steps=0, checkpoint_every_steps=0))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"bogus_steps": 1}, "unknown config key: config.bogus_steps; did you mean "),
        ({"num_train_steps": 0}, "config.num_train_steps=0: must be at least 1"),
        ({"train_batch_size": 0}, "config.train_batch_size=0: must be at least 1"),
        ({"num_eval_steps": -1}, "config.num_eval_steps=-1: must be >= 0"),
        ({"eval_every_steps": -1}, "config.eval_every_steps=-1: must be >= 0"),
        ({"checkpoint_every_steps": -2}, "config.checkpoint_every_steps=-2: must be >= 0"),
        ({"preemption_save_seconds": 0.0}, "config.preemption_save_seconds=0.0: must be above 0"),
        ({"platform": "tpu7"}, "config.platform='tpu7': must be one of tpu, gpu, cpu, any"),
        (
            {"data.max_seq_length": 1024},
            "config.data.max_seq_length=1024 is above the model's max_position_embeddings=512",
        ),
        (
            {"model.max_position_embeddings": 64},
            "config.data.max_seq_length=128 is above the model's max_position_embeddings=64",
        ),
        (
            {"data.max_predictions_per_seq": 200},
            "config.data.max_predictions_per_seq=200: cannot exceed max_seq_length - 3 = 125",
        ),
        ({"data.vocab_sise": 10}, "unknown config key: config.data.vocab_sise"),
        ({"model.hidden_sise": 10}, r"unknown model option\(s\): config.model.hidden_sise"),
        (
            {"model.hidden_size": 100, "model.num_attention_heads": 3},
            "hidden_size=100: must be divisible by num_attention_heads=3",
        ),
        (
            {"optimizer.warmup_steps": 5000},
            "config.optimizer.warmup_steps=5000 is above num_train_steps=3000",
        ),
        (
            {"optimizer.learning_rate": math.nan},
            "config.optimizer.learning_rate=nan: must be a finite number",
        ),
    ],
)
def test_config_errors_name_the_option(changes, message):
    with pytest.raises(ConfigError, match=message):
        TASK.check_config(tiny_config(**changes))


def test_a_missing_key_is_named():
    config = tiny_config()
    del config["num_eval_steps"]
    with pytest.raises(ConfigError, match="^missing config key: config.num_eval_steps$"):
        TASK.check_config(config)


def test_evaluating_the_whole_split_is_for_one_host_only():
    with pytest.raises(
        ConfigError,
        match=r"config.num_eval_steps=0 \(the whole split\) works on one host only; "
        "set it for this 2-host run",
    ):
        TASK.check_hosts(tiny_config(num_eval_steps=0), 2)
    TASK.check_hosts(tiny_config(num_eval_steps=0), 1)
    TASK.check_hosts(tiny_config(num_eval_steps=5), 2)
    TASK.check_hosts(tiny_config(num_eval_steps=0, eval_every_steps=0), 2)  # no evaluation


# ------------------------------------------------------------------ what runs are ranked by


def test_the_best_evaluation_is_the_lowest_loss():
    metric = TASK.best_metric(tiny_config())
    assert (metric.name, metric.fn, metric.higher_is_better) == ("loss", None, False)
    assert metric.is_better(2.0, 2.5) and not metric.is_better(2.5, 2.0)
    assert metric.is_better(9.0, None) and not metric.is_better(math.nan, 9.0)


def test_the_task_table_holds_this_task():
    assert tasks.get("pretraining") is TASK
    assert TASK.name == "pretraining" and TASK.predict_file is None and TASK.report is not None


# ------------------------------------------------------------------------------- FLOPs

# L=2, H=16, A=2, I=32, V=40.
SMALL = model_lib.BertConfig(
    num_hidden_layers=2,
    hidden_size=16,
    num_attention_heads=2,
    intermediate_size=32,
    vocab_size=40,
    max_position_embeddings=16,
)
ROW = {**dict.fromkeys(("input_ids", "input_mask", "segment_ids"), 8), "masked_lm_positions": 3}


def test_forward_flops_is_the_trimmed_encoder_plus_both_heads():
    # A layer over 8 tokens with q queries: 4*8*16*16 (key, value) + q * (4*16*16 (query,
    # output) + 4*8*16 (scores, weighted sum) + 4*16*32 (feed-forward)) = 8192 + 3584 q.
    # The last layer's queries are [CLS] and the 3 masked positions: 36864 + 22528.
    # Heads: pooler 2*16*16 + NSP 2*16*2; MLM 3 * (2*16*16 + 2*16*40).
    counted = TASK.forward_flops(SMALL, ROW, WITH_NSP)
    assert counted == 59392 + 576 + 5376 == 65344
    heads = flops.pooler_flops(SMALL) + 2 * 16 * 2 + 3 * (2 * 16 * 16 + 2 * 16 * 40)
    assert counted == flops.encoder_flops(SMALL, 8, 1 + 3) + heads


@pytest.mark.parametrize(
    "change", [dict(scan_layers=True), dict(trim_last_layer=False)], ids=["scanned", "untrimmed"]
)
def test_an_untrimmed_last_layer_counts_every_position(change):
    counted = TASK.forward_flops(dataclasses.replace(SMALL, **change), ROW, WITH_NSP)
    assert counted == 2 * 36864 + 5952 == 79680


def test_a_packed_row_counts_the_next_sentence_head_once_per_slot():
    # Two [CLS] and 3 masked positions in the last layer: 36864 + (8192 + 5 * 3584).
    counted = TASK.forward_flops(SMALL, {**ROW, "cls_positions": 2}, WITH_NSP)
    assert counted == 36864 + 26112 + 2 * 576 + 5376 == 69504


# ------------------------------------------------------------------ without_data and setup


def test_without_data_writes_a_placeholder_vocabulary_of_the_models_size(tmp_path):
    config = tiny_config(**{"data.vocab_size": 300, "init_checkpoint": "runs/phase1"})
    changed = TASK.without_data(config, str(tmp_path))
    assert changed.data.vocab_file == str(tmp_path / "vocab.txt")
    lines = (tmp_path / "vocab.txt").read_text().splitlines()
    assert len(lines) == 300 == changed.model.vocab_size
    assert lines[:6] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "piece0"]
    assert changed.init_checkpoint == ""
    # The config given is left as it was.
    assert config.data.vocab_file == "" and config.init_checkpoint == "runs/phase1"


def test_setup_builds_from_the_placeholder_vocabulary_without_a_corpus(tmp_path):
    config, setup = built(tmp_path)
    assert setup.model.inputs == {
        "input_ids": 128,
        "input_mask": 128,
        "segment_ids": 128,
        "masked_lm_positions": 20,
    }
    assert setup.model.config == model_lib.from_config(config.model)
    assert isinstance(setup.model.module, model_lib.BertForPreTraining)
    assert setup.objective.features == schema.features(False)
    assert setup.objective.num_train_steps == 3000
    assert setup.objective.console == (("mlm_accuracy", "mlm_acc"), ("nsp_accuracy", "nsp_acc"))
    assert (setup.evaluation.every_steps, setup.evaluation.num_steps) == (1000, 0)
    assert setup.evaluation.checkpoint_each is False
    assert setup.data.vocab_file == str(tmp_path / "aside" / "vocab.txt")
    assert setup.init == Initialization()
    assert setup.description == pretraining.describe(config.data)


def test_batch_shapes_follow_the_schema_at_the_models_lengths(tmp_path):
    _, setup = built(tmp_path)
    assert TASK.batch_shapes(setup, "train", 4) == {
        "input_ids": ((4, 128), np.int32),
        "input_mask": ((4, 128), np.int32),
        "segment_ids": ((4, 128), np.int32),
        "masked_lm_positions": ((4, 20), np.int32),
        "masked_lm_ids": ((4, 20), np.int32),
        "masked_lm_weights": ((4, 20), np.float32),
        "next_sentence_labels": ((4,), np.int32),
    }
    assert TASK.batch_shapes(setup, "eval", 4) == TASK.batch_shapes(setup, "train", 4)


def test_packed_rows_add_a_cls_position_and_a_next_sentence_weight_per_slot(tmp_path):
    _, setup = built(tmp_path, **{"data.pack_examples": True, "data.max_sequences_per_row": 3})
    assert setup.model.inputs["cls_positions"] == 3
    assert setup.objective.features[-2:] == ("next_sentence_weights", "cls_positions")
    shapes = TASK.batch_shapes(setup, "train", 2)
    assert shapes["next_sentence_labels"] == ((2, 3), np.int32)
    assert shapes["next_sentence_weights"] == ((2, 3), np.float32)
    assert shapes["cls_positions"] == ((2, 3), np.int32)
    assert shapes["input_ids"] == ((2, 128), np.int32)


def test_describe_keeps_the_tokenizer_settings_and_the_length():
    data = tiny_config(**{"data.do_lower_case": False, "data.max_seq_length": 64}).data
    description = pretraining.describe(data)
    assert description.max_seq_length == 64
    assert description.tokenizer_data == {
        **dataclasses.asdict(data_config_lib.DataConfig()),
        "do_lower_case": False,
        "max_seq_length": 64,
    }
    assert (description.num_labels, description.label_names, description.data) == (0, (), None)


def test_make_model_is_the_pretraining_model_of_the_saved_config():
    model = TASK.make_model(SMALL, WITH_NSP)
    assert isinstance(model, model_lib.BertForPreTraining) and model.config == SMALL


def test_a_vocabulary_of_another_size_names_both_sizes(tmp_path):
    vocab = write_placeholder_vocab(str(tmp_path / "small.txt"), 10)
    with pytest.raises(
        ConfigError,
        match=f"the vocabulary {vocab} has 10 entries but config.model.vocab_size=4096",
    ):
        TASK.setup(tiny_config(**{"data.vocab_file": vocab}), str(tmp_path / "run"))


def test_a_missing_vocabulary_file_is_named(tmp_path):
    missing = str(tmp_path / "absent.txt")
    with pytest.raises(VocabError, match=f"config.data.vocab_file='{missing}': no such file"):
        TASK.setup(tiny_config(**{"data.vocab_file": missing}), str(tmp_path / "run"))


def test_a_resumed_run_keeps_its_workdirs_vocabulary(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_placeholder_vocab(str(run / "vocab.txt"), 4096)
    config = tiny_config(**{"data.vocab_file": str(tmp_path / "gone.txt")})
    assert TASK.setup(config, str(run)).data.vocab_file == str(run / "vocab.txt")


def test_a_workdir_of_another_model_shape_is_refused(tmp_path):
    run = tmp_path / "saved" / "run"
    saved = dataclasses.replace(model_lib.from_config(tiny_config().model), hidden_size=64)
    describe_workdir(run, saved)
    with pytest.raises(
        CheckpointError,
        match=f"workdir {run}: the saved model has hidden_size=64, "
        "this run config.model.hidden_size=128",
    ):
        TASK.setup(TASK.without_data(tiny_config(), str(tmp_path / "aside")), str(run))


def test_a_run_on_tfrecords_not_yet_written_builds_and_names_its_files_when_it_reads(tmp_path):
    # bertjax.tpu.aot compiles a run before its data exists: setup globs nothing. The
    # files the train streams read (whose digest a checkpoint keeps with the positions)
    # are listed as the streams start.
    shards = tmp_path / "shards"
    config = TASK.without_data(tiny_config(), str(tmp_path / "aside"))
    config.data.source = "tfrecord"
    config.data.tfrecord_train_files = str(shards / "train-*.tfrecord")
    config.data.tfrecord_eval_files = str(shards / "eval-*.tfrecord")
    setup = TASK.setup(config, str(tmp_path / "run"))
    with pytest.raises(UserError, match="tfrecord_train_files: glob matches no files"):
        setup.data.train_files()
    shards.mkdir()
    for name in ("train-1.tfrecord", "train-0.tfrecord", "eval-0.tfrecord"):
        (shards / name).write_bytes(b"")
    assert list(setup.data.train_files()) == [str(shards / f"train-{i}.tfrecord") for i in (0, 1)]


def test_an_init_checkpoint_without_a_model_config_is_named(tmp_path):
    phase1 = tmp_path / "phase1"
    config = tiny_config(init_checkpoint=str(phase1))
    with pytest.raises(CheckpointError, match=f"init_checkpoint='{phase1}': does not exist$"):
        TASK.setup(config, str(tmp_path / "run"))
    phase1.mkdir()
    with pytest.raises(
        CheckpointError,
        match=f"config.init_checkpoint='{phase1}': not a bertjax workdir \\(no model_config.json",
    ):
        TASK.setup(config, str(tmp_path / "run"))


def test_phase_two_takes_every_parameter_in_the_checkpoints_layout(tmp_path):
    model_config = model_lib.from_config(tiny_config().model)
    phase1 = describe_workdir(
        tmp_path / "p1" / "w", dataclasses.replace(model_config, scan_layers=True)
    )
    vocab = write_placeholder_vocab(str(tmp_path / "aside" / "vocab.txt"), 4096)
    config = tiny_config(init_checkpoint=phase1, **{"data.vocab_file": vocab})
    setup = TASK.setup(config, str(tmp_path / "run"))
    assert setup.init == Initialization(
        checkpoint=phase1, keys=("bert", "predictions", "seq_relationship"), scan_layers=True
    )
    deeper = describe_workdir(
        tmp_path / "p2" / "w", dataclasses.replace(model_config, num_hidden_layers=4)
    )
    with pytest.raises(
        CheckpointError,
        match=f"config.init_checkpoint='{deeper}': the saved model has num_hidden_layers=4",
    ):
        TASK.setup(
            tiny_config(init_checkpoint=deeper, **{"data.vocab_file": vocab}), str(tmp_path / "r2")
        )


# ---------------------------------------------------------- the objective and the evaluation


def test_the_denominators_are_the_masked_positions_and_the_sequences(tmp_path):
    _, setup = built(tmp_path)
    weights = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    batch = {"masked_lm_weights": weights, "next_sentence_labels": jnp.array([0, 1])}
    mlm, nsp = setup.objective.denominators(batch)
    assert (float(mlm), float(nsp)) == (3.0, 2.0)
    packed = {**batch, "next_sentence_weights": jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])}
    assert float(setup.objective.denominators(packed)[1]) == 3.0
    sums = {"mlm_loss_sum": jnp.float32(6.0), "nsp_loss_sum": jnp.float32(1.0)}
    assert float(setup.objective.loss(sums, (jnp.float32(3.0), jnp.float32(2.0)))) == 2.5


def test_the_sums_of_uniform_logits_are_log_of_the_choices(tmp_path):
    _, setup = built(tmp_path)
    batch = {
        "masked_lm_ids": jnp.array([[1, 2, 3], [0, 1, 0]]),
        "masked_lm_weights": jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
        "next_sentence_labels": jnp.array([0, 1]),
    }
    sums = setup.objective.sums((jnp.zeros((2, 3, 4)), jnp.zeros((2, 2))), batch)
    assert float(sums["mlm_weight"]) == 5.0 and float(sums["nsp_count"]) == 2.0
    assert float(sums["mlm_loss_sum"]) == pytest.approx(5 * math.log(4), rel=1e-6)
    assert float(sums["nsp_loss_sum"]) == pytest.approx(2 * math.log(2), rel=1e-6)


def test_the_evaluation_scores_the_sums_of_every_batch(tmp_path):
    _, setup = built(tmp_path)
    first = dict(
        mlm_loss_sum=4.0, mlm_correct=1.0, mlm_weight=2.0, nsp_loss_sum=1.0, nsp_correct=1.0
    )
    second = dict(
        mlm_loss_sum=2.0, mlm_correct=2.0, mlm_weight=2.0, nsp_loss_sum=0.5, nsp_correct=2.0
    )
    batches = [{**first, "nsp_count": 2.0}, {**second, "nsp_count": 2.0}]
    values, predictions = setup.evaluation.score(
        [{k: np.float32(v) for k, v in b.items()} for b in batches]
    )
    assert predictions is None
    assert values == pytest.approx(
        {
            "loss": 6.0 / 4 + 1.5 / 4,
            "mlm_loss": 1.5,
            "mlm_accuracy": 0.75,
            "mlm_perplexity": math.exp(1.5),
            "nsp_loss": 0.375,
            "nsp_accuracy": 0.75,
        }
    )


# ------------------------------------------------------------------ masked LM alone


@pytest.mark.parametrize("packed", [False, True])
def test_masked_lm_alone_builds_a_model_without_the_nsp_head_and_reads_no_nsp(tmp_path, packed):
    _, setup = built(
        tmp_path,
        **{"data.next_sentence_prediction": False, "data.pack_examples": packed},
    )
    assert setup.model.module.next_sentence is False
    # Packed rows need no cls_positions: only the NSP head reads them.
    assert "cls_positions" not in setup.model.inputs
    assert setup.objective.features == schema.features(packed, next_sentence=False)
    assert not {"next_sentence_labels", "next_sentence_weights"} & set(setup.objective.features)
    assert set(TASK.batch_shapes(setup, "train", 2)) == set(setup.objective.features)
    assert setup.objective.console == (("mlm_accuracy", "mlm_acc"),)
    # The loss divides the MLM sum alone by the whole batch's masked positions.
    batch = {
        "masked_lm_ids": jnp.array([[1, 2, 3], [0, 1, 0]]),
        "masked_lm_weights": jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
    }
    denominators = setup.objective.denominators(batch)
    assert float(denominators[0]) == 5.0 and denominators[1] is None
    sums = setup.objective.sums((jnp.zeros((2, 3, 4)), None), batch)
    assert set(sums) == {"mlm_loss_sum", "mlm_correct", "mlm_weight"}
    loss = setup.objective.loss(sums, denominators)
    assert float(loss) == pytest.approx(math.log(4), rel=1e-6)
    assert "nsp_accuracy" not in setup.objective.summarize(sums)


def test_masked_lm_alone_continues_a_checkpoint_without_the_nsp_head(tmp_path):
    model_config = model_lib.from_config(tiny_config().model)
    phase1 = describe_workdir(tmp_path / "p1" / "w", model_config)
    vocab = write_placeholder_vocab(str(tmp_path / "aside" / "vocab.txt"), 4096)
    config = tiny_config(
        init_checkpoint=phase1,
        **{"data.vocab_file": vocab, "data.next_sentence_prediction": False},
    )
    setup = TASK.setup(config, str(tmp_path / "run"))
    assert setup.init.keys == ("bert", "predictions")


def test_a_workdirs_model_has_the_nsp_head_its_run_had():
    without = Description(8, {"next_sentence_prediction": False})
    assert TASK.make_model(SMALL, without).next_sentence is False
    # A workdir written before the option: one line saying what to add.
    with pytest.raises(
        CheckpointError, match=r'^task.json: .*; add "next_sentence_prediction": true to it$'
    ):
        TASK.make_model(SMALL, Description(8, {}))
    # The pooler and the NSP classifier are not counted: ROW's MLM head and encoder only.
    counted = TASK.forward_flops(SMALL, ROW, without)
    assert counted == 65344 - (2 * 16 * 16 + 2 * 16 * 2)


def test_too_few_predictions_for_the_masking_rate_is_a_config_error():
    config = tiny_config(**{"data.masked_lm_prob": 0.3})
    with pytest.raises(ConfigError, match=r"^config\.data\.max_predictions_per_seq=20: .*0\.3"):
        TASK.check_config(config)
    TASK.check_config(
        tiny_config(**{"data.masked_lm_prob": 0.3, "data.max_predictions_per_seq": 40})
    )
