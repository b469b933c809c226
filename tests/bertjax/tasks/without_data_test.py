"""Task.without_data of the fine-tuning tasks: a config that builds before its init
checkpoint and its data exist (python -m bertjax.tpu.aot; the compiles themselves are in
tests/bertjax/tpu/compile_report_test.py)."""

import json
import os
import pathlib

import pytest
from support import REPO

from bertjax import model as model_lib
from bertjax import workdir as workdir_lib
from bertjax.tasks import classification, finetune, reranking, retrieval
from data_pipeline import config as data_config_lib
from data_pipeline.errors import ConfigError
from experiments.finetune import reranking_pod, retrieval_pod
from experiments.pretrain import modernbert_base_phase2


def test_a_pretraining_config_stands_for_the_run_it_will_make(tmp_path):
    config = retrieval_pod.get_config("modernbert_base")
    config.init_checkpoint = os.path.join(REPO, "experiments/pretrain/modernbert_base_phase2.py")
    built = finetune.without_checkpoint(config, str(tmp_path))
    placeholder = built.init_checkpoint
    assert placeholder == str(tmp_path / "pretrained")
    expected = model_lib.from_config(modernbert_base_phase2.get_config().model)
    assert workdir_lib.read_model_config(placeholder) == expected
    vocab = workdir_lib.require_vocab_file(placeholder, what="placeholder")
    assert len(pathlib.Path(vocab).read_text().splitlines()) == expected.vocab_size
    # Masked LM alone, as ModernBERT pretrains: fine-tuning starts without a pooler.
    assert not workdir_lib.read_tokenizer_data(placeholder)["next_sentence_prediction"]
    assert config.init_checkpoint.endswith(".py")  # the config given is not changed


def test_a_run_from_a_pretraining_config_is_refused_in_one_line():
    config = retrieval_pod.get_config("bert_base")
    config.init_checkpoint = "experiments/pretrain/bert_base_phase2.py"
    with pytest.raises(ConfigError, match="only in bertjax.tpu.aot; fine-tune from the workdir"):
        retrieval.check_config(config)


def test_a_workdir_init_checkpoint_is_left_as_it_is(tmp_path):
    config = retrieval_pod.get_config("bert_base")
    assert finetune.without_checkpoint(config, str(tmp_path)).to_dict() == config.to_dict()
    assert not os.listdir(tmp_path)
    assert classification.TASK.without_data is finetune.without_checkpoint


@pytest.mark.parametrize(
    "spec, message",
    [
        ("experiments/pretrain/nope.py", "no such experiment config"),
        ("experiments/pretrain/bert_base.py:large", r"not an experiment config \(TypeError"),
    ],
)
def test_a_pretraining_config_that_cannot_be_read_is_one_line(tmp_path, spec, message):
    config = retrieval_pod.get_config("bert_base")
    config.init_checkpoint = os.path.join(REPO, spec)
    with pytest.raises(ConfigError, match=message) as raised:
        finetune.without_checkpoint(config, str(tmp_path))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("margins", [False, True])
def test_retrieval_builds_on_placeholder_pairs_of_every_column(tmp_path, margins):
    config = retrieval_pod.get_config("bert_base")
    config.init_checkpoint = os.path.join(REPO, "experiments/pretrain/tiny_cpu.py")
    config.data.negatives = ("hard",)
    if margins:  # hard negatives mined by passage id, and the scorer's margins
        config.data.beir_dir, config.data.train_file, config.data.eval_file = "beir", "", ""
        config.data.negatives, config.data.negatives_file = (), "mined.jsonl"
        config.data.num_negatives, config.loss.name = 3, "margin_mse"
    config.train_batch_size, config.eval_batch_size = 16, 24
    built = retrieval.without_data(config, str(tmp_path))
    assert built.data.beir_dir == "" and built.data.train_file == built.data.eval_file
    rows = list(map(json.loads, pathlib.Path(built.data.train_file).read_text().splitlines()))
    negatives = 3 if margins else 1
    columns = {"anchor", "positive", *(f"negative_{k}" for k in range(negatives))}
    assert len(rows) == 24 and set(rows[0]) == columns | {f"margin_{k}" for k in range(3 * margins)}
    setup = retrieval.TASK.setup(built, str(tmp_path / "run"))
    assert setup.objective.num_train_steps == 1
    assert ("teacher_margins" in setup.objective.features) == margins
    width = 1 + negatives
    assert setup.model.inputs == {
        "query_ids": 64, "query_mask": 64, "passage_ids": width * 256, "passage_mask": width * 256
    }  # fmt: skip
    data_config_lib.read_config_file(os.path.join(REPO, "experiments/finetune/retrieval_pod.py"))


@pytest.mark.parametrize("pairs", [False, True])
def test_reranking_builds_on_placeholder_groups_of_its_size(tmp_path, pairs):
    config = reranking_pod.get_config("bert_base")
    config.init_checkpoint = os.path.join(REPO, "experiments/pretrain/tiny_cpu.py")
    config.data.num_negatives = 3
    config.train_batch_size, config.eval_batch_size = 16, 24
    if pairs:
        config.data.passage = "passage"
    built = reranking.without_data(config, str(tmp_path))
    assert built.data.beir_dir == "" and built.data.train_file == built.data.eval_file
    rows = list(map(json.loads, pathlib.Path(built.data.train_file).read_text().splitlines()))
    assert len(rows) == 24
    setup = reranking.TASK.setup(built, str(tmp_path / "run"))
    assert setup.objective.num_train_steps == 1
    size = 1 if pairs else 4
    assert setup.model.inputs == dict.fromkeys(
        ("input_ids", "input_mask", "segment_ids"), size * 256
    )
    data_config_lib.read_config_file(os.path.join(REPO, "experiments/finetune/reranking_pod.py"))
