"""Rerankers in and out: a sentence-transformers CrossEncoder imports as a reranking workdir
whose bertjax.rerank scores are CrossEncoder.predict's (the identity activation), and a
reranking workdir exports as a CrossEncoder and as transformers' one-label sequence
classifier with the same scores."""

import json

import numpy as np
import pytest

import bertjax
from bertjax.convert import import_export, sentence_transformers

QUERY = "where does the with statement keep its context manager?"
PASSAGES = [
    "The with statement wraps a block in the methods of a context manager.",
    "A man is playing guitar.",
    "Ünïcödé text, with punctuation!?",
    "x",
    "word " * 600,  # past 512 tokens: the passage is cut, as transformers cuts the pair
]


@pytest.fixture
def cross_encoder_dir(minilm_dir, tmp_path_factory, test_extras):
    """all-MiniLM-L6-v2 as a CrossEncoder of one label (a seeded new head), saved."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    model = CrossEncoder(str(minilm_dir), num_labels=1, activation_fn=torch.nn.Identity())
    directory = tmp_path_factory.mktemp("cross_encoder") / "ce"
    model.save(str(directory))
    return directory


def predicted(directory) -> np.ndarray:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(directory), device="cpu")
    return model.predict([(QUERY, passage) for passage in PASSAGES], batch_size=2)


@pytest.mark.slow  # sentence-transformers' import, two models in torch and an import: 20 s
def test_a_cross_encoder_imports_as_a_reranker_and_exports_back(cross_encoder_dir, tmp_path):
    theirs = predicted(cross_encoder_dir)
    result = import_export.import_checkpoint("hf", str(cross_encoder_dir), str(tmp_path / "w"))
    assert result["cross_encoder"] and result["pooling"] is None
    restored = bertjax.restore(str(tmp_path / "w"))
    assert restored.kind == "reranking" and restored.max_seq_length == 512
    ours = bertjax.rerank(restored, QUERY, PASSAGES, batch_size=2)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)

    exported = tmp_path / "exported"
    import_export.export_sentence_transformers(str(tmp_path / "w"), str(exported))
    np.testing.assert_allclose(predicted(exported), ours, atol=1e-5)
    settings = json.loads((exported / sentence_transformers.MODEL_CONFIG_FILE).read_text())
    assert settings["model_type"] == "CrossEncoder"

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    hf = tmp_path / "hf"
    import_export.export_hf(str(tmp_path / "w"), str(hf))
    model = AutoModelForSequenceClassification.from_pretrained(str(hf)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(hf))
    inputs = tokenizer([QUERY] * 4, PASSAGES[:4], padding=True, return_tensors="pt")
    logits = model(**inputs).logits.detach().numpy()
    assert logits.shape == (4, 1)
    np.testing.assert_allclose(logits[:, 0], ours[:4], atol=1e-5)
    # transformers' own classifier, with its config's activation, is a CrossEncoder too.
    assert sentence_transformers.is_cross_encoder(str(hf))


def test_a_directory_is_a_cross_encoder_by_what_sentence_transformers_saved(tmp_path):
    config = {"architectures": ["BertForSequenceClassification"], "num_labels": 1}
    for name, files in {
        "six": {"config_sentence_transformers.json": {"model_type": "CrossEncoder"}},
        "five": {"config.json": {**config, "sentence_transformers": {"activation_fn": "x"}}},
        "three": {"config.json": {**config, "sbert_ce_default_activation_function": None}},
        "plain": {"config.json": config},
        "embedder": {"config_sentence_transformers.json": {"model_type": "SentenceTransformer"}},
    }.items():
        (tmp_path / name).mkdir()
        for file, values in files.items():
            (tmp_path / name / file).write_text(json.dumps(values))
        expected = name in ("six", "five", "three")
        assert sentence_transformers.is_cross_encoder(str(tmp_path / name)) == expected, name
