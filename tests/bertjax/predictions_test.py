"""bertjax.predictions: the input and workdir checks (each error names the file or flag), and
predictions written for files of new examples from tiny workdirs made here (a width-16
model with random parameters: the format of the output is tested, not what it
says). The program's flags are tested through `python -m bertjax.predict`."""

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from support import REPO

from bertjax import checkpoint, predictions
from bertjax import workdir as workdir_lib
from bertjax.model import (
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertjax.tasks import pretraining
from bertjax.tasks.contract import Description
from bertjax.workdir import CheckpointError
from data_pipeline.errors import ConfigError
from data_pipeline.finetune import (
    classification_config,
    tagging_config,
)
from data_pipeline.finetune.records import TaskDataError
from experiments.pretrain import tiny_cpu

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "paris", "."]
MODEL = BertConfig(
    num_hidden_layers=1,
    hidden_size=16,
    num_attention_heads=2,
    intermediate_size=32,
    vocab_size=len(TOKENS),
    max_position_embeddings=32,
)
TAGS = ("B-LOC", "O")


def describe(workdir, kind: str, description: Description) -> None:
    """A run's description in `workdir`: config, model config, vocabulary and task.json."""
    vocab = os.path.join(os.path.dirname(workdir), "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in TOKENS))
    workdir_lib.write_run_description(
        str(workdir),
        tiny_cpu.get_config(),
        MODEL,
        vocab,
        kind=kind,
        description=description.to_json(),
    )


def save_params(workdir, model: nn.Module) -> None:
    """A step-1 checkpoint of random parameters of `model`'s shapes (nothing compiled)."""
    ids = jnp.zeros((1, 4), jnp.int32)
    extra = (ids[:, :1],) if isinstance(model, BertForPreTraining) else ()
    shapes = jax.eval_shape(
        lambda: nn.unbox(model.init(jax.random.key(0), ids, ids, ids, *extra, deterministic=True))
    )["params"]
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: rng.normal(0.0, 0.02, x.shape).astype(x.dtype), shapes)
    with checkpoint.make_manager(str(workdir), max_to_keep=1) as manager:
        checkpoint.save(manager, 1, {"params": params}, data={})


def tokenizer_data() -> dict:
    return pretraining.describe(tiny_cpu.get_config().data).tokenizer_data


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory) -> dict:
    """Tiny pretraining, classification and tagging workdirs, each with a checkpoint."""
    root = tmp_path_factory.mktemp("workdirs")
    data = classification_config.default_config()
    data.update(train_file="train.tsv", text_a="sentence", max_seq_length=16)
    made = {
        "pretraining": (BertForPreTraining(MODEL), Description(16, tokenizer_data())),
        "classification": (
            BertForSequenceClassification(MODEL, 2),
            Description(
                16,
                tokenizer_data(),
                num_labels=2,
                label_names=("no", "yes"),
                metrics=("accuracy",),
                data=data.to_dict(),
            ),
        ),
        "tagging": (
            BertForTokenClassification(MODEL, len(TAGS)),
            Description(
                16,
                tokenizer_data(),
                num_labels=len(TAGS),
                label_names=TAGS,
                metrics=("entity_f1",),
                data={**tagging_config.default_config().to_dict(), "train_file": "eng.train"},
            ),
        ),
    }
    paths = {}
    for kind, (model, description) in made.items():
        (root / kind).mkdir()
        paths[kind] = root / kind / "w"
        describe(paths[kind], kind, description)
        save_params(paths[kind], model)
    return paths


# ------------------------------------------------------------------ refusals that name it


def test_a_missing_input_is_named_before_the_workdir_is_read(tmp_path):
    absent = tmp_path / "new.tsv"
    with pytest.raises(FileNotFoundError, match=f"^--input={absent}: no such file$"):
        predictions.predict(str(tmp_path / "no_workdir"), str(absent))


def test_a_folder_that_is_no_workdir_is_named(tmp_path):
    (tmp_path / "new.tsv").write_text("sentence\nthe cat sat\n")
    with pytest.raises(CheckpointError, match=f"^{tmp_path}: no model_config.json; expected a"):
        predictions.predict(str(tmp_path), str(tmp_path / "new.tsv"))


def test_a_workdir_without_a_checkpoint_is_named(tmp_path):
    describe(tmp_path / "w", "classification", Description(16, tokenizer_data()))
    (tmp_path / "new.tsv").write_text("sentence\nthe cat sat\n")
    with pytest.raises(CheckpointError, match=f"^{tmp_path / 'w'}: no checkpoint to restore$"):
        predictions.predict(str(tmp_path / "w"), str(tmp_path / "new.tsv"))


def test_a_workdir_of_an_unknown_task_names_its_task_json(tmp_path):
    describe(tmp_path / "w", "summarize", Description(16, tokenizer_data()))
    (tmp_path / "new.tsv").write_text("sentence\nthe cat sat\n")
    task_file = tmp_path / "w" / workdir_lib.TASK_FILE
    with pytest.raises(ConfigError, match=f"^{task_file}: kind='summarize': must be one of"):
        predictions.predict(str(tmp_path / "w"), str(tmp_path / "new.tsv"))


def test_a_pretraining_workdir_is_refused(workdirs, tmp_path):
    (tmp_path / "new.tsv").write_text("sentence\nthe cat sat\n")
    with pytest.raises(
        CheckpointError,
        match=f"^--workdir={workdirs['pretraining']}: a pretraining workdir; "
        "predict needs a fine-tuned one$",
    ):
        predictions.predict(str(workdirs["pretraining"]), str(tmp_path / "new.tsv"))


def test_a_step_that_was_not_saved_is_refused(workdirs, tmp_path):
    (tmp_path / "new.tsv").write_text("sentence\nthe cat sat\n")
    missing = workdirs["classification"] / "checkpoints" / "7"
    with pytest.raises(CheckpointError, match=f"^{missing}: no such checkpoint; steps there: 1$"):
        predictions.predict(str(workdirs["classification"]), str(tmp_path / "new.tsv"), step=7)


# ---------------------------------------------------------------------------- predictions


def read_lines(path) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow  # the first forward pass compiles each op eagerly: 4-8 s of CPU
def test_a_classifier_writes_a_label_and_probabilities_per_row_next_to_the_input(
    workdirs, tmp_path
):
    source = tmp_path / "new.tsv"
    source.write_text("sentence\tlabel\nthe cat sat\t\nparis .\t\nthe the the\t\n")
    written = predictions.predict(str(workdirs["classification"]), str(source), batch_size=2)
    assert written == str(source) + ".predictions.jsonl"
    lines = read_lines(written)
    assert len(lines) == 3
    for line in lines:
        assert set(line) == {"label", "probabilities"}
        assert list(line["probabilities"]) == ["no", "yes"]
        assert sum(line["probabilities"].values()) == pytest.approx(1.0, abs=1e-6)
        assert line["label"] == max(line["probabilities"], key=line["probabilities"].get)
    # One row at a time: the same predictions, at another output path.
    one_by_one = predictions.predict(
        str(workdirs["classification"]), str(source), str(tmp_path / "out.jsonl"), batch_size=1
    )
    assert one_by_one == str(tmp_path / "out.jsonl")
    again = read_lines(one_by_one)
    assert [line["label"] for line in again] == [line["label"] for line in lines]
    for line, alone in zip(lines, again, strict=True):
        assert alone["probabilities"] == pytest.approx(line["probabilities"], abs=1e-6)


@pytest.mark.slow  # the first forward pass compiles each op eagerly: 4-8 s of CPU
def test_a_classifier_reads_jsonl_without_labels(workdirs, tmp_path):
    jsonl = tmp_path / "new.jsonl"
    jsonl.write_text('{"sentence": "the cat sat"}\n{"sentence": "paris ."}\n')
    tsv = tmp_path / "new.tsv"
    tsv.write_text("sentence\nthe cat sat\nparis .\n")
    lines = read_lines(predictions.predict(str(workdirs["classification"]), str(jsonl)))
    assert len(lines) == 2 and all(line["label"] in ("no", "yes") for line in lines)
    assert lines == read_lines(predictions.predict(str(workdirs["classification"]), str(tsv)))


def test_a_file_without_the_text_column_is_named(workdirs, tmp_path):
    source = tmp_path / "new.tsv"
    source.write_text("text\nthe cat sat\n")
    with pytest.raises(
        TaskDataError,
        match=re.escape(f"{source}: no column 'sentence' (config.data.text_a); the header"),
    ):
        predictions.predict(str(workdirs["classification"]), str(source))
    assert not os.path.exists(str(source) + ".predictions.jsonl")


@pytest.mark.slow  # the first forward pass compiles each op eagerly: 4-8 s of CPU
def test_a_tagger_writes_the_words_and_a_tag_each_per_line(workdirs, tmp_path):
    source = tmp_path / "sentences.txt"
    source.write_text("the cat sat in Paris\n\n  \nParis .\n")
    lines = read_lines(predictions.predict(str(workdirs["tagging"]), str(source)))
    assert [line["words"] for line in lines] == [
        ["the", "cat", "sat", "in", "Paris"],
        ["Paris", "."],
    ]
    assert [len(line["tags"]) for line in lines] == [5, 2]
    assert all(tag in TAGS for line in lines for tag in line["tags"])


# ------------------------------------------------------------------------------ the program


def run_predict(*flags):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "bertjax.predict", *flags],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.integration
def test_the_program_needs_workdir_and_input_and_names_a_missing_input(tmp_path):
    result = run_predict("--input", str(tmp_path / "x.tsv"))
    assert result.returncode == 2
    assert "--workdir" in result.stderr
    result = run_predict("--workdir", str(tmp_path), "--input", str(tmp_path / "x.tsv"))
    assert result.returncode == 2
    assert f"error: --input={tmp_path / 'x.tsv'}: no such file" in result.stderr
    assert result.stdout == ""
