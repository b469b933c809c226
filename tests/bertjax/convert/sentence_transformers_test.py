"""A sentence-transformers directory imports with how it embeds, and bertjax.embed then
gives its vectors: all-MiniLM-L6-v2 against SentenceTransformer(dir).encode."""

import json
import shutil

import numpy as np
import pytest

import bertjax
from bertjax.convert import import_export, sentence_transformers
from bertjax.convert.errors import ConversionError
from bertjax.embedding import Pooling

TEXTS = [
    "The cat sits outside.",
    "A man is playing guitar.",
    "Ünïcödé text, with punctuation!?",
    "x",
    "The with statement wraps a block in the methods of a context manager. " * 8,
    "word " * 300,  # 302 tokens with [CLS] and [SEP]: past MiniLM's 256, cut as ST cuts it
]


def sentence_transformer(directory, test_extras):
    del test_extras  # on sys.path now
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(directory), device="cpu")


@pytest.mark.slow  # sentence-transformers' import and two encoders: 8 s of CPU
def test_minilm_imports_as_an_embedder_that_embeds_as_sentence_transformers(
    minilm_dir, minilm_workdir, test_extras
):
    restored = bertjax.restore(str(minilm_workdir))
    assert restored.pooling == Pooling(mode="mean", normalize=True, max_seq_length=256)
    theirs = sentence_transformer(minilm_dir, test_extras).encode(TEXTS)
    ours = bertjax.embed(restored, TEXTS, batch_size=4)  # two batches of two widths
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="text 5 is 302 tokens .* max_seq_length 256"):
        bertjax.embed(restored, TEXTS, truncate=False)


@pytest.mark.integration  # two imports and two models in torch: 7 to 8 s of CPU each
@pytest.mark.parametrize("mode,ours", [("cls", "cls"), ("lasttoken", "last")])
def test_each_pooling_mode_embeds_as_sentence_transformers(
    minilm_dir, tmp_path, test_extras, mode, ours
):
    source = tmp_path / "st"
    shutil.copytree(minilm_dir, source)
    (source / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 384, "pooling_mode": mode, "include_prompt": True})
    )
    modules = json.loads((source / "modules.json").read_text())
    (source / "modules.json").write_text(json.dumps(modules[:2]))  # without Normalize
    import_export.import_checkpoint("hf", str(source), str(tmp_path / "w"))
    restored = bertjax.restore(str(tmp_path / "w"))
    assert restored.pooling == Pooling(mode=ours, normalize=False, max_seq_length=256)
    theirs = sentence_transformer(source, test_extras).encode(TEXTS)
    np.testing.assert_allclose(bertjax.embed(restored, TEXTS), theirs, atol=1e-5)


@pytest.mark.slow  # sentence-transformers' import, an import and two encoders: 11 to 21 s of CPU
def test_a_directory_without_modules_json_embeds_as_sentence_transformers_reads_it(
    minilm_dir, tmp_path, test_extras
):
    # sentence-transformers reads neither sentence_bert_config.json (256) nor 1_Pooling
    # then: mean pooling, not normalized, texts cut at tokenizer_config.json's 512.
    source = tmp_path / "hf"
    shutil.copytree(minilm_dir, source)
    (source / "modules.json").unlink()
    result = import_export.import_checkpoint("hf", str(source), str(tmp_path / "w"))
    assert result["pooling"] == Pooling(mode="mean", normalize=False, max_seq_length=512)
    restored = bertjax.restore(str(tmp_path / "w"))
    assert restored.pooling == result["pooling"]
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(str(source), device="cpu", local_files_only=True)
    texts = [*TEXTS, "word " * 600]  # 602 tokens: cut at 512 on both sides
    np.testing.assert_allclose(bertjax.embed(restored, texts), theirs.encode(texts), atol=1e-5)


def write_pipeline(directory, modules, pooling=None, settings=None):
    directory.mkdir(exist_ok=True)
    types = {
        "Transformer": "",
        "Pooling": "1_Pooling",
        "Normalize": "2_Normalize",
        "Dense": "2_Dense",
    }
    (directory / "modules.json").write_text(
        json.dumps(
            [
                {"idx": i, "name": str(i), "path": types[kind], "type": f"st.models.{kind}"}
                for i, kind in enumerate(modules)
            ]
        )
    )
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps(pooling or {"pooling_mode": "mean"})
    )
    (directory / "sentence_bert_config.json").write_text(
        json.dumps(settings or {"max_seq_length": 128})
    )


def test_the_pipeline_is_read_from_its_files_old_and_new(tmp_path):
    write_pipeline(tmp_path, ["Transformer", "Pooling", "Normalize"])
    assert sentence_transformers.read(str(tmp_path)) == (
        str(tmp_path) + "/",
        Pooling("mean", normalize=True, max_seq_length=128),
    )
    legacy = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    write_pipeline(tmp_path, ["Transformer", "Pooling"], legacy)
    assert sentence_transformers.read(str(tmp_path))[1] == Pooling("cls", False, 128)


def test_a_length_past_the_models_positions_is_cut_at_them(tmp_path):
    write_pipeline(tmp_path, ["Transformer", "Pooling"], settings={"max_seq_length": 100000})
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    assert sentence_transformers.read(str(tmp_path))[1].max_seq_length == 512


def test_without_modules_json_the_tokenizers_length_cuts_else_the_positions(tmp_path):
    write_pipeline(tmp_path, ["Transformer", "Pooling"], settings={"max_seq_length": 64})
    (tmp_path / "modules.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    assert sentence_transformers.without_modules(str(tmp_path)) == Pooling("mean", False, 512)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 256}))
    assert sentence_transformers.without_modules(str(tmp_path)) == Pooling("mean", False, 256)


@pytest.mark.parametrize(
    "modules,pooling,settings,message",
    [
        (["Transformer", "Pooling", "Dense"], None, None, "Transformer -> Pooling -> Dense"),
        (["Pooling"], None, None, "modules Pooling; bertjax embeds"),
        (["Transformer", "Pooling"], {"pooling_mode": "max"}, None, "pooling max; bertjax"),
        (
            ["Transformer", "Pooling"],
            {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
            None,
            "pooling mean\\+max",
        ),
        (["Transformer", "Pooling"], None, {"max_seq_length": "long"}, "'long' is not a length"),
    ],
)
def test_a_pipeline_bertjax_cannot_embed_as_is_refused_naming_the_file(
    tmp_path, modules, pooling, settings, message
):
    write_pipeline(tmp_path, modules, pooling, settings)
    with pytest.raises(ConversionError, match=message):
        sentence_transformers.read(str(tmp_path))
