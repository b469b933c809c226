"""`bertjax.convert export --format sentence-transformers`: a workdir as a directory that
`SentenceTransformer(OUT).encode` reads to bertjax.embed's vectors, its encoder a bare
transformers BertModel (or ModernBertModel: modernbert_convert_test.py) that loads with
nothing missing or unexpected.

The oracle is sentence-transformers 6.2 (test extras), loading the export as a user would;
for all-MiniLM-L6-v2 also the package it was imported from.
"""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import linen as nn
from safetensors.numpy import load_file
from support import REPO, SMALL_VOCAB_SIZE

import bertjax
from bertjax import checkpoint
from bertjax import workdir as workdir_lib
from bertjax.convert import import_export, sentence_transformers
from bertjax.convert.errors import ConversionError
from bertjax.embedding import Pooling
from bertjax.model import BertConfig, BertForPreTraining
from bertjax.tasks import pretraining
from experiments.pretrain import tiny_cpu

transformers = pytest.importorskip("transformers")

TEXTS = [
    "The cat sits outside.",
    "Ünïcödé text, with punctuation!?",
    "x",
    "word " * 300,  # 302 tokens with [CLS] and [SEP]: past every length below, cut there
]


def sentence_transformer(directory, test_extras):
    del test_extras  # on sys.path now
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(directory), device="cpu")


def loading_info(directory, **kwargs) -> dict:
    _, info = transformers.AutoModel.from_pretrained(
        str(directory), output_loading_info=True, **kwargs
    )
    return info


@pytest.mark.slow  # sentence-transformers' import and three MiniLM encoders: 20 s of CPU
def test_minilm_exports_as_the_sentence_transformer_it_was_imported_from(
    minilm_dir, minilm_workdir, tmp_path, test_extras
):
    out = tmp_path / "st"
    result = import_export.export_sentence_transformers(str(minilm_workdir), str(out))
    assert result["class"] == "BertModel"
    assert result["pooling"] == Pooling("mean", normalize=True, max_seq_length=256)
    # Imported again, the directory says how it embeds (sentence-transformers 6 keeps the
    # length in tokenizer_config.json).
    assert sentence_transformers.read(str(out)) == (str(out) + "/", result["pooling"])

    ours = bertjax.embed(bertjax.restore(str(minilm_workdir)), TEXTS)
    exported = sentence_transformer(out, test_extras)
    assert exported.max_seq_length == 256
    theirs = exported.encode(TEXTS)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    original = sentence_transformer(minilm_dir, test_extras).encode(TEXTS)
    np.testing.assert_allclose(theirs, original, atol=1e-5)
    print(
        f"MiniLM exported: {np.abs(theirs - ours).max():.1e} from bertjax.embed, "
        f"{np.abs(theirs - original).max():.1e} from the original package"
    )
    # BertModel with its pooler, no pretraining heads: nothing missing or unexpected.
    assert not any(loading_info(out).values())
    assert all(
        not name.startswith(("bert.", "cls.")) for name in load_file(out / "model.safetensors")
    )


@pytest.mark.slow  # sentence-transformers' import and torch: 6 s of CPU, near the limit
def test_a_pretraining_workdir_exports_with_the_default_pooling(
    pretrained_run, tmp_path, test_extras
):
    out = tmp_path / "st"
    result = import_export.export_sentence_transformers(pretrained_run.workdir, str(out))
    # task.json has no "embedding": Pooling()'s mean, not normalized, at the run's 64 tokens.
    assert result["pooling"] == Pooling("mean", normalize=False, max_seq_length=64)
    modules = json.loads((out / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling"]

    ours = bertjax.embed(bertjax.restore(pretrained_run.workdir), TEXTS)
    theirs = sentence_transformer(out, test_extras).encode(TEXTS)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    print(f"pretraining workdir exported: {np.abs(theirs - ours).max():.1e} from bertjax.embed")
    assert not any(loading_info(out).values())  # pretrained with NSP: it has its pooler


def no_pooler_workdir(root, vocab_file) -> str:
    """A tiny BERT pretrained with masked LM alone (no pooler, no NSP head), random weights,
    that embeds by [CLS], normalized, cutting texts to 16 tokens."""
    config = tiny_cpu.get_config()
    config.data.vocab_file, config.data.vocab_size = vocab_file, SMALL_VOCAB_SIZE
    config.data.next_sentence_prediction = False
    model_config = BertConfig(
        num_hidden_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=SMALL_VOCAB_SIZE,
        max_position_embeddings=64,
    )
    description = pretraining.describe(config.data).to_json()
    description["embedding"] = Pooling("cls", normalize=True, max_seq_length=16).to_json()
    workdir = os.path.join(root, "w")
    workdir_lib.write_run_description(
        workdir, config, model_config, vocab_file, kind="pretraining", description=description
    )
    model = BertForPreTraining(model_config, next_sentence=False)
    ids = np.zeros((1, 4), np.int32)
    shapes = jax.eval_shape(
        lambda: nn.unbox(model.init(jax.random.key(0), ids, ids, ids, ids, deterministic=True))
    )["params"]
    assert "pooler" not in shapes["bert"]
    rng = np.random.default_rng(3)
    params = jax.tree.map(lambda x: rng.normal(0.0, 0.5, x.shape).astype(x.dtype), shapes)
    with checkpoint.make_manager(workdir, max_to_keep=1) as manager:
        checkpoint.save(manager, 2, {"params": params}, data={})
    return workdir


@pytest.mark.slow  # sentence-transformers' import and torch: 5 s of CPU, near the limit
def test_a_bert_without_a_pooler_exports_without_one(small_vocab_file, tmp_path, test_extras):
    workdir = no_pooler_workdir(tmp_path, small_vocab_file)
    out = tmp_path / "st"
    result = import_export.export_sentence_transformers(workdir, str(out))
    assert result["pooling"] == Pooling("cls", normalize=True, max_seq_length=16)
    assert not any("pooler" in name for name in load_file(out / "model.safetensors"))
    # A random pooler would pass for a trained one: none is written, and the pipeline's
    # BertModel is made without one.
    settings = json.loads((out / "sentence_bert_config.json").read_text())
    assert settings["model_kwargs"] == {"add_pooling_layer": False}
    assert not any(loading_info(out, add_pooling_layer=False).values())

    ours = bertjax.embed(bertjax.restore(workdir), TEXTS)
    theirs = sentence_transformer(out, test_extras).encode(TEXTS)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-6)
    print(f"BERT without a pooler exported: {np.abs(theirs - ours).max():.1e} from bertjax.embed")


@pytest.mark.integration  # the command line, in a process of its own
def test_the_command_exports_and_says_how_it_embeds(pretrained_run, tmp_path):
    out = tmp_path / "st"
    command = [sys.executable, "-m", "bertjax.convert", "export"]
    args = ["--format", "sentence-transformers", pretrained_run.workdir, str(out)]
    result = subprocess.run(
        [*command, *args],
        cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"exported {pretrained_run.workdir} step 4 to {out} as a sentence-transformers model "
        "(BertModel, mean pooling, texts cut to 64 tokens)"
    ]
    assert sorted(os.listdir(out)) == [
        "1_Pooling",
        "config.json",
        "config_sentence_transformers.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    assert os.listdir(tmp_path) == ["st"]  # no staging folder left


@pytest.mark.parametrize(
    "pooling",
    [Pooling("mean", True, 128), Pooling("cls", False, 128), Pooling("last", True, 128)],
)
def test_the_pipeline_written_reads_back(tmp_path, pooling):
    # The length is the tokenizer's model_max_length, as sentence-transformers 6 saves it,
    # at most the model's positions.
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 128}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    sentence_transformers.write(str(tmp_path), pooling, 16)
    assert sentence_transformers.read(str(tmp_path)) == (str(tmp_path) + "/", pooling)
    assert (tmp_path / "2_Normalize").exists() == pooling.normalize


def test_a_pooling_that_cannot_be_written_is_refused_before_anything_is(small_vocab_file, tmp_path):
    workdir = no_pooler_workdir(tmp_path, small_vocab_file)
    task_file = os.path.join(workdir, workdir_lib.TASK_FILE)
    with open(task_file) as f:
        task = json.load(f)
    task["embedding"] = {"mode": "max"}
    with open(task_file, "w") as f:
        json.dump(task, f)
    with pytest.raises(ConversionError, match=f'{task_file}: "embedding": pooling=.max.: use'):
        import_export.export_sentence_transformers(workdir, str(tmp_path / "st" / "out"))
    assert not (tmp_path / "st").exists()
