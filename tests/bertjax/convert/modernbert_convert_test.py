"""bertjax.convert with ModernBERT: transformers' ModernBertForMaskedLM and ModernBertModel
folders in, each task's ModernBert class out, tokenizer included.

The source is a randomly initialised ModernBertForMaskedLM (PyTorch, transformers 5) with a
byte-level BPE tokenizer.json built as ModernBERT's is (support/bpe.py); no released
ModernBERT checkpoint can be had offline. The oracles are transformers in eval mode and the
`tokenizers` library, loading the files as a user would.
"""

import json
import os
import pathlib
import shutil

import jax
import numpy as np
import pytest
from flax import linen as nn
from support import TESTDATA
from support.bpe import modernbert_like

import bertjax
from bertjax import checkpoint, predictions, train
from bertjax import workdir as workdir_lib
from bertjax.convert import config_json, import_export
from bertjax.model import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertjax.tasks.contract import Description
from experiments.finetune import classify
from experiments.pretrain import tiny_cpu

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4
# Four layers (0 and 3 global), windows of 8 tokens: the texts below are longer.
SHAPE = dict(
    hidden_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=72,
    local_attention=8,
    global_attn_every_n_layers=3,
    global_rope_theta=160000.0,
    local_rope_theta=1000.0,
    max_position_embeddings=128,
)
TEXTS = [
    "The quick brown fox jumps over the lazy dog, and then it jumps over the lazy dog again.",
    "Café résumé: naïve Ångström measurements (unbelievably) precise!",
    "def f(x):\n    return x ** 2  # squares\tthings",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A ModernBertForMaskedLM folder (safetensors, config.json, tokenizer.json) and its model."""
    tokenizer = modernbert_like(size=600)
    ids = {t: tokenizer.token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]")}
    config = transformers.ModernBertConfig(
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"],
        attn_implementation="eager",
        **SHAPE,
    )
    torch.manual_seed(0)
    model = transformers.ModernBertForMaskedLM(config).eval()
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if "norm" in name or name == "decoder.bias":
                tensor.copy_(torch.randn_like(tensor) * 0.1 + (0.0 if "bias" in name else 1.0))
    directory = tmp_path_factory.mktemp("modernbert")
    model.save_pretrained(str(directory))
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory, model, tokenizer


@pytest.fixture(scope="module")
def imported(source, tmp_path_factory):
    directory, _, _ = source
    workdir = tmp_path_factory.mktemp("imported") / "workdir"
    result = import_export.import_checkpoint("hf", str(directory), str(workdir))
    return str(workdir), result


def torch_inputs(ours: dict) -> dict:
    return {
        "input_ids": torch.tensor(ours["input_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(ours["input_mask"]),
    }


def test_an_imported_modernbert_computes_as_transformers(source, imported):
    _, model, tokenizer = source
    workdir, result = imported
    assert result["initialized"] == [] and result["do_lower_case"] is False
    restored = bertjax.restore(workdir)
    assert restored.config.feed_forward == "geglu" and restored.config.global_attention_every == 3
    ours = bertjax.encode(restored, TEXTS)
    # bertjax's BPE pipeline gives the library's ids, with [CLS] and [SEP] around them.
    for row, text in zip(ours["input_ids"], TEXTS, strict=True):
        assert row[row > 0].tolist() == tokenizer.encode(text).ids
    assert ours["input_ids"].shape[1] > SHAPE["local_attention"] * 2
    real = ours["input_mask"].astype(bool)
    with torch.no_grad():
        hidden = model.model(**torch_inputs(ours)).last_hidden_state.numpy()
        logits = model(**torch_inputs(ours)).logits.numpy()
    np.testing.assert_allclose(ours["sequence_output"][real], hidden[real], atol=TOLERANCE)
    everywhere = np.broadcast_to(np.arange(real.shape[1]), real.shape).astype(np.int32)
    mlm, nsp = restored.model.apply(
        {"params": restored.params},
        ours["input_ids"],
        ours["input_mask"],
        ours["segment_ids"],
        everywhere,
        deterministic=True,
    )
    assert nsp is None
    np.testing.assert_allclose(np.asarray(mlm)[real], logits[real], atol=TOLERANCE)
    # fill_mask, the notebook API, works on it.
    guesses = bertjax.fill_mask(restored, "The quick brown [MASK] jumps.", top_k=3)
    assert len(guesses[0]) == 3
    # Guesses read as text ("fox" with its space), not as byte-level symbols ("Ġfox").
    assert not any("\u0120" in token for token, _ in guesses[0])


def test_a_modernbert_model_without_its_head_imports_with_a_fresh_head(source, tmp_path):
    directory, model, _ = source
    encoder = tmp_path / "encoder"
    model.model.save_pretrained(str(encoder))
    (encoder / "tokenizer.json").write_bytes((directory / "tokenizer.json").read_bytes())
    result = import_export.import_checkpoint("hf", str(encoder), str(tmp_path / "workdir"))
    assert result["initialized"] == ["predictions"]


def test_exported_it_loads_in_transformers_as_it_came(source, imported, tmp_path):
    directory, model, tokenizer = source
    workdir, _ = imported
    out = tmp_path / "exported"
    result = import_export.export_hf(workdir, str(out))
    assert result["class"] == "ModernBertForMaskedLM"
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(
        str(out), output_loading_info=True
    )
    assert not any(info.values()), info
    theirs, back = model.state_dict(), loaded.state_dict()
    assert set(theirs) == set(back)
    for name, tensor in theirs.items():
        np.testing.assert_array_equal(back[name].numpy(), tensor.numpy(), err_msg=name)

    # The same architecture, in transformers 4.x's keys or 5.x's.
    def read(config, where):
        return config_json.from_modernbert(json.loads(config.to_json_string()), where)

    assert read(loaded.config, "out") == read(model.config, "in")
    # AutoTokenizer gives bertjax's ids, and no token type ids (ModernBERT takes none).
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    encoded = auto(TEXTS, padding=True, return_tensors="np")
    assert set(encoded) == {"input_ids", "attention_mask"}
    ours = bertjax.encode(bertjax.restore(workdir), TEXTS)
    np.testing.assert_array_equal(encoded["attention_mask"], ours["input_mask"])
    real = ours["input_mask"].astype(bool)
    np.testing.assert_array_equal(encoded["input_ids"][real], ours["input_ids"][real])
    del directory, tokenizer


# case -> (our head, its labels, the transformers Auto class that loads it).
HEADS = {
    "classification": (
        BertForSequenceClassification,
        ("negative", "positive"),
        "AutoModelForSequenceClassification",
    ),
    "tagging": (BertForTokenClassification, ("B", "I", "O"), "AutoModelForTokenClassification"),
    "squad": (BertForQuestionAnswering, (), "AutoModelForQuestionAnswering"),
}


def finetuned_workdir(imported_workdir: str, root, case: str) -> str:
    """A `case` workdir at step 3: the imported encoder under random heads (the pooler
    included, ModernBERT's task head), with the description a fine-tuning run writes."""
    head, labels, _ = HEADS[case]
    pretrained = bertjax.restore(imported_workdir)
    workdir = os.path.join(root, case)
    workdir_lib.write_run_description(
        workdir,
        tiny_cpu.get_config(),
        pretrained.config,
        workdir_lib.vocab_file(imported_workdir),
        kind=case,
        description=Description(
            max_seq_length=128,
            tokenizer_data=pretrained.task.tokenizer_data,
            num_labels=len(labels) or 2,
            label_names=labels,
        ).to_json(),
    )
    model = head(pretrained.config) if not labels else head(pretrained.config, len(labels))
    ids = np.zeros((1, 4), np.int32)
    shapes = jax.eval_shape(
        lambda: nn.unbox(model.init(jax.random.key(0), ids, ids, ids, deterministic=True))
    )["params"]
    rng = np.random.default_rng(7)
    params = jax.tree.map(lambda x: rng.normal(0.0, 0.5, x.shape).astype(x.dtype), shapes)
    params["bert"] = {**params["bert"], **pretrained.params["bert"]}
    with checkpoint.make_manager(workdir, max_to_keep=1) as manager:
        checkpoint.save(manager, 3, {"params": params}, data={})
    return workdir


@pytest.mark.parametrize("case", list(HEADS))
def test_a_fine_tuned_modern_head_exports_as_its_modernbert_class(imported, tmp_path, case):
    workdir = finetuned_workdir(imported[0], tmp_path, case)
    out = tmp_path / "exported"
    result = import_export.export_hf(workdir, str(out))
    head, labels, auto = HEADS[case]
    assert result["class"] == "ModernBert" + head.__name__.removeprefix("Bert")
    model, info = getattr(transformers, auto).from_pretrained(str(out), output_loading_info=True)
    assert not any(info.values()), info
    if labels:
        assert model.config.id2label == dict(enumerate(labels))

    restored = bertjax.restore(workdir)
    ours = bertjax.encode(restored, TEXTS)
    got = restored.apply(ours)
    with torch.no_grad():
        output = model.eval()(**torch_inputs(ours))
    want = (output.start_logits, output.end_logits) if case == "squad" else (output.logits,)
    got = got if case == "squad" else (got,)
    real = ours["input_mask"].astype(bool)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), w.numpy()
        if case != "classification":  # padding positions are the models' own business
            g, w = g[real], w[real]
        np.testing.assert_allclose(g, w, atol=TOLERANCE, rtol=0)


def test_fine_tuning_and_predict_run_on_an_imported_modernbert(imported, tmp_path):
    config = classify.get_config()
    config.init_checkpoint = imported[0]
    config.train_batch_size = config.eval_batch_size = 8
    config.num_train_epochs = 2.0  # 4 examples x 2 epochs / 8 = 1 step
    config.data.train_file = str(TESTDATA / "finetune" / "mrpc_train.tsv")
    config.data.eval_file = str(TESTDATA / "finetune" / "mrpc_dev.tsv")
    config.data.text_a, config.data.text_b = "#1 String", "#2 String"
    config.data.label = "Quality"
    config.data.max_seq_length = 64
    workdir = str(tmp_path / "mrpc")
    results = train.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    assert 0.0 <= results["eval"]["accuracy"] <= 1.0
    output = predictions.predict(
        workdir, config.data.eval_file, str(tmp_path / "predictions.jsonl")
    )
    assert len(pathlib.Path(output).read_text().splitlines()) == 3
    # And it exports as transformers' class of its task.
    exported = import_export.export_hf(workdir, str(tmp_path / "exported"))
    assert exported["class"] == "ModernBertForSequenceClassification"


def test_a_modern_model_pretrained_with_nsp_has_no_transformers_class(imported, tmp_path):
    workdir = tmp_path / "with_nsp"
    shutil.copytree(imported[0], workdir)
    task = json.loads((workdir / workdir_lib.TASK_FILE).read_text())
    task["tokenizer_data"]["next_sentence_prediction"] = True
    (workdir / workdir_lib.TASK_FILE).write_text(json.dumps(task))
    with pytest.raises(import_export.ConversionError, match="pretrained with next-sentence"):
        import_export.export_hf(str(workdir), str(tmp_path / "out"))


def test_a_mix_of_the_two_blocks_is_refused_before_anything_is_restored(imported, tmp_path):
    workdir = tmp_path / "mixed"
    shutil.copytree(imported[0], workdir)
    path = workdir / workdir_lib.MODEL_CONFIG_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "feed_forward": "mlp"}))
    with pytest.raises(import_export.ConversionError, match="neither BERT's nor ModernBERT's"):
        import_export.export_hf(str(workdir), str(tmp_path / "out"))


def test_a_modernbert_workdir_exports_as_a_sentence_transformer(imported, tmp_path, test_extras):
    from sentence_transformers import SentenceTransformer  # test_extras put it on sys.path

    # A classification workdir: its pooler (ModernBERT's `head`) and classifier stay behind.
    workdir = finetuned_workdir(imported[0], tmp_path, "classification")
    out = tmp_path / "st"
    result = import_export.export_sentence_transformers(workdir, str(out))
    assert result["class"] == "ModernBertModel"
    _, info = transformers.AutoModel.from_pretrained(str(out), output_loading_info=True)
    assert not any(info.values()), info
    texts = [*TEXTS, "word " * 200]  # past the run's 128 tokens: cut there
    ours = bertjax.embed(bertjax.restore(workdir), texts)
    theirs = SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    print(f"ModernBERT exported: {np.abs(theirs - ours).max():.1e} from bertjax.embed")
