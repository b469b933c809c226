"""bertjax.convert (import_export, param_names): Google TF and Hugging Face checkpoints in, Hugging Face out.

The oracles are transformers' PyTorch BERT in eval mode and the checkpoint's
own tokenizer (`tokenizers`). The TF checkpoint is written here with the
original variable names, derived from Hugging Face's by rules spelled out in
this file rather than by the table under test.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
import tokenizers
from flax import linen as nn
from flax import traverse_util
from safetensors.numpy import load_file, save_file
from support import REPO

import bertjax
from bertjax import checkpoint, inference, train
from bertjax import workdir as workdir_lib
from bertjax.convert import import_export, param_names
from bertjax.model import BertConfig, BertForPreTraining, BertModel, unstack_layers
from data_pipeline.errors import UserError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Small, with every size distinct so that a transposed or misreshaped kernel cannot pass.
SMALL = dict(
    vocab_size=70,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=96,
    max_position_embeddings=40,
    type_vocab_size=2,
)
WORDS = [f"w{i}" for i in range(SMALL["vocab_size"] - 5)]

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]


def make_batch(vocab_size, batch=3, length=20, predictions=4, seed=0):
    """Random features; example i ends in 3 * i padding positions."""
    rng = np.random.default_rng(seed)
    input_mask = np.ones((batch, length), np.int32)
    for i in range(batch):
        input_mask[i, length - 3 * i :] = 0
    input_ids = rng.integers(5, vocab_size, (batch, length), dtype=np.int32) * input_mask
    segment_ids = (np.arange(length) >= length // 2).astype(np.int32)[None] * input_mask
    shortest = length - 3 * (batch - 1)
    positions = np.sort(rng.integers(0, shortest, (batch, predictions)), axis=1).astype(np.int32)
    return dict(
        input_ids=input_ids,
        input_mask=input_mask,
        segment_ids=segment_ids,
        masked_lm_positions=positions,
    )


def our_logits(config, params, batch):
    mlm, nsp = BertForPreTraining(config).apply(
        {"params": params}, **{k: jnp.asarray(v) for k, v in batch.items()}, deterministic=True
    )
    return np.asarray(mlm), np.asarray(nsp)


def hf_logits(hf_model, batch):
    with torch.no_grad():
        out = hf_model(
            input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
        )
    mlm = np.take_along_axis(
        out.prediction_logits.numpy(), batch["masked_lm_positions"][..., None], axis=1
    )
    return mlm, out.seq_relationship_logits.numpy()


def init_params(config):
    ids = jnp.zeros((1, 4), jnp.int32)
    variables = BertForPreTraining(config).init(
        jax.random.key(0), ids, ids, ids, ids[:, :1], deterministic=True
    )
    return nn.unbox(variables["params"])


def restore(workdir):
    """The workdir's config and parameters, as pretraining's init_checkpoint reads them."""
    config = workdir_lib.read_model_config(str(workdir))
    abstract = jax.eval_shape(lambda: init_params(config))
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), abstract
    )
    params, _ = checkpoint.restore_params(str(workdir), abstract)
    return config, jax.tree.map(np.asarray, params)


def assert_close(got, want, atol):
    diff = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
    assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"
    return diff


def check_no_output(parent):
    """Neither the workdir nor a half-written staging folder."""
    assert os.listdir(parent) == []


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def hf_small(tmp_path_factory):
    """(directory, model): a random transformers BertForPreTraining saved as safetensors."""
    torch.manual_seed(0)
    # gelu_new (tanh) is what the original's "gelu" is, so the TF test can share these weights.
    hf_config = transformers.BertConfig(**SMALL, hidden_act="gelu_new")
    model = transformers.BertForPreTraining(hf_config).eval()
    with torch.no_grad():  # Zero biases and unit scales would hide a mapping mistake.
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    directory = tmp_path_factory.mktemp("hf_small")
    model.save_pretrained(directory, safe_serialization=True)
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return directory, model


@pytest.fixture(scope="module")
def small_workdir(hf_small, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("imported") / "w"
    result = import_export.import_checkpoint(
        "hf", str(hf_small[0]), str(workdir), do_lower_case=True
    )
    assert result["initialized"] == []
    return workdir


# --------------------------------------------------------------------------- the table


def test_table_covers_every_parameter_once():
    config = BertConfig.from_dict(SMALL)
    flat = traverse_util.flatten_dict(jax.eval_shape(lambda: init_params(config)), sep="/")
    for fmt in param_names.FORMATS:
        table = param_names.names(fmt, config.num_hidden_layers)
        assert set(table) == set(flat)
        source_names = [name for name, _ in table.values()]
        assert len(set(source_names)) == len(source_names)


def test_table_spells_the_original_names():
    tf_names = {ours: name for ours, (name, _) in param_names.names("tf", 1).items()}
    layer = "bert/encoder/layer_0/"
    assert tf_names[layer + "attention/query/kernel"] == layer + "attention/self/query/kernel"
    assert tf_names[layer + "attention/output/kernel"] == layer + "attention/output/dense/kernel"
    assert (
        tf_names[layer + "attention_LayerNorm/scale"] == layer + "attention/output/LayerNorm/gamma"
    )
    assert tf_names[layer + "output_LayerNorm/bias"] == layer + "output/LayerNorm/beta"
    assert tf_names["seq_relationship/kernel"] == "cls/seq_relationship/output_weights"
    assert tf_names["predictions/LayerNorm/scale"] == "cls/predictions/transform/LayerNorm/gamma"


def test_layouts_invert():
    rng = np.random.default_rng(0)
    shape_of = {  # one parameter per layout: H=6, A=2, D=3, I=5
        param_names.SAME: (7, 6),
        param_names.KERNEL: (6, 5),
        param_names.KERNEL_TO_HEADS: (6, 2, 3),
        param_names.BIAS_TO_HEADS: (2, 3),
        param_names.KERNEL_FROM_HEADS: (2, 3, 6),
        param_names.TRANSPOSED_KERNEL: (6, 2),
    }
    for layout, shape in shape_of.items():
        ours = rng.normal(size=shape)
        for fmt in param_names.FORMATS:
            theirs = param_names.from_ours(ours, layout, fmt)
            assert theirs.shape == param_names.source_shape(layout, fmt, shape)
            assert theirs.ndim <= 2
            np.testing.assert_array_equal(param_names.to_ours(theirs, layout, fmt, shape), ours)
    # PyTorch's query weight [A * D, H]: row j is output feature j = head j // D, index j % D.
    kernel = np.arange(36.0).reshape(6, 6)
    ours = param_names.to_ours(kernel, param_names.KERNEL_TO_HEADS, "hf", (6, 2, 3))
    np.testing.assert_array_equal(ours[:, 1, 2], kernel[5])


# --------------------------------------------------------------------------- MiniLM


SENTENCES = [
    "A man is playing a guitar.",
    "Someone is playing an instrument on stage.",
    "The cat sleeps on the warm windowsill.",
    "A kitten is napping in the sun by the window.",
    "Quarterly revenue rose 12% thanks to strong cloud sales, the company said on Tuesday.",
    "Café résumé: naïve Ångström measurements (unbelievably) precise!",
]
RELATED = [(0, 1), (2, 3)]


@pytest.mark.slow
def test_minilm_matches_transformers(minilm_dir, minilm_workdir):
    restored = inference.restore(str(minilm_workdir))
    assert restored.config.hidden_act == "gelu"  # Hugging Face's "gelu" is the erf form.
    vocab = restored.tokenizer.vocab

    # Tokenization: the workdir's tokenizer against the checkpoint's tokenizer.json.
    pieces = restored.tokenizer.tokenize(tf.constant(SENTENCES)).to_list()
    ids = [[vocab.cls_id, *p, vocab.sep_id] for p in pieces]
    oracle = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    oracle.no_padding()
    oracle.no_truncation()
    assert ids == [e.ids for e in oracle.encode_batch(SENTENCES)]

    length = max(map(len, ids))
    assert len(set(map(len, ids))) == len(ids)  # every sentence a different length
    input_ids = np.array([row + [vocab.pad_id] * (length - len(row)) for row in ids], np.int32)
    input_mask = (np.arange(length)[None] < np.array([len(r) for r in ids])[:, None]).astype(
        np.int32
    )
    sequence, _ = BertModel(restored.config).apply(
        {"params": restored.params["bert"]},
        jnp.asarray(input_ids),
        jnp.asarray(input_mask),
        jnp.zeros_like(input_ids),
        deterministic=True,
    )
    hf_model = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    with torch.no_grad():
        want = hf_model(
            input_ids=torch.tensor(input_ids, dtype=torch.long),
            attention_mask=torch.tensor(input_mask, dtype=torch.long),
        ).last_hidden_state.numpy()
    real = input_mask.astype(bool)
    diff = assert_close(np.asarray(sequence)[real], want[real], 1e-4)
    print(f"MiniLM hidden states: max abs diff {diff:.2e}")

    def mean_pooled(hidden):
        pooled = (hidden * input_mask[..., None]).sum(1) / input_mask.sum(1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    ours, theirs = mean_pooled(np.asarray(sequence)), mean_pooled(want)
    assert_close(ours, theirs, 1e-5)
    similarity = ours @ ours.T
    print(f"MiniLM cosine similarities:\n{np.round(similarity, 3)}")
    unrelated = [(i, j) for i in range(4) for j in range(i + 1, 5) if (i, j) not in RELATED]
    assert min(similarity[p] for p in RELATED) > max(similarity[p] for p in unrelated) + 0.2


@pytest.mark.slow
def test_attention_maps_match_transformers(minilm_dir, minilm_workdir):
    restored = bertjax.restore(str(minilm_workdir))
    text = "The with statement closes the file for you."
    maps, tokens = bertjax.attention_maps(restored, text)
    ids = [restored.tokenizer.vocab.token_to_id(t) for t in tokens]
    hf_model = transformers.BertModel.from_pretrained(
        str(minilm_dir), attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        want = hf_model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    want = np.stack([layer[0].numpy() for layer in want])
    assert maps.shape == want.shape == (6, 12, len(ids), len(ids))
    assert_close(maps, want, 1e-5)


def test_minilm_workdir_layout(minilm_workdir):
    names = set(os.listdir(minilm_workdir))
    assert {"config.json", "model_config.json", "vocab.json", "checkpoints"} <= names
    assert os.listdir(minilm_workdir / "checkpoints") == ["0"]
    run_config = json.loads((minilm_workdir / "config.json").read_text())
    assert run_config["data"]["vocab_file"] == str(minilm_workdir / "vocab.json")
    assert run_config["data"]["do_lower_case"] is True
    # HF's WordPiece gives up at 100 characters, and the tokenizers must agree.
    assert run_config["data"]["max_chars_per_word"] == 100
    assert run_config["model"]["hidden_size"] == 384
    assert run_config["converted_from"]["format"] == "hf"
    # A sentence-transformers BertModel: no heads, names without "bert.".
    assert run_config["converted_from"]["initialized"] == ["predictions", "seq_relationship"]
    assert run_config["converted_from"]["ignored"] == ["bert.embeddings.position_ids"]
    assert [n for n in os.listdir(minilm_workdir.parent) if n != "w"] == []


# --------------------------------------------------------------------------- heads and round trip


@pytest.mark.slow
def test_pretraining_heads_match_transformers(hf_small, small_workdir):
    config, params = restore(small_workdir)
    assert config.hidden_act == "gelu_tanh"
    batch = make_batch(config.vocab_size)
    mlm, nsp = our_logits(config, params, batch)
    want_mlm, want_nsp = hf_logits(hf_small[1], batch)
    mlm_diff = assert_close(mlm, want_mlm, 1e-4)
    nsp_diff = assert_close(nsp, want_nsp, 1e-4)
    print(f"heads: MLM max abs diff {mlm_diff:.2e}, NSP {nsp_diff:.2e}")


@pytest.mark.slow
@pytest.mark.parametrize("scan_layers", [False, True], ids=["per_layer", "scan_layers"])
def test_round_trip_through_hugging_face(hf_small, small_workdir, tmp_path, scan_layers):
    config, params = restore(small_workdir)
    exported = tmp_path / "hf"
    import_export.export_hf(str(small_workdir), str(exported))
    assert sorted(os.listdir(exported)) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    assert (exported / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == VOCAB
    # The exported tensors are the ones transformers saved (minus its tied copies).
    original = load_file(str(hf_small[0] / "model.safetensors"))
    again = load_file(str(exported / "model.safetensors"))
    assert set(again) == set(original)
    for name, value in original.items():
        np.testing.assert_array_equal(again[name], value, err_msg=name)

    model, info = transformers.BertForPreTraining.from_pretrained(
        str(exported), output_loading_info=True
    )
    assert not any(info.values()), info
    batch = make_batch(config.vocab_size, seed=1)
    diffs = [
        assert_close(got, want, 1e-4)
        for got, want in zip(
            hf_logits(model.eval(), batch), our_logits(config, params, batch), strict=True
        )
    ]
    print(f"exported, in transformers: MLM max abs diff {diffs[0]:.2e}, NSP {diffs[1]:.2e}")

    reimported = tmp_path / "reimported"
    import_export.import_checkpoint(
        "hf", str(exported), str(reimported), do_lower_case=True, scan_layers=scan_layers
    )
    config2, params2 = restore(reimported)
    assert config2 == BertConfig.from_dict({**config.to_dict(), "scan_layers": scan_layers})
    if scan_layers:
        params2 = {**params2, "bert": unstack_layers(params2["bert"], config.num_hidden_layers)}
        twice = tmp_path / "twice"
        import_export.export_hf(str(reimported), str(twice))
        assert load_file(str(twice / "model.safetensors")).keys() == again.keys()
    jax.tree.map(np.testing.assert_array_equal, params2, params)


def tf_variable(hf_name, value):
    """The original checkpoint's variable holding a Hugging Face tensor, or None for a tied copy."""
    name = re.sub(r"layer\.(\d+)\.", r"layer_\1/", hf_name).replace(".", "/")
    if name.startswith("cls/predictions/decoder/"):
        return None
    special = {
        "cls/predictions/bias": "cls/predictions/output_bias",
        "cls/seq_relationship/weight": "cls/seq_relationship/output_weights",  # [2, H] as is
        "cls/seq_relationship/bias": "cls/seq_relationship/output_bias",
    }
    if name in special:
        return special[name], value
    if name.endswith("_embeddings/weight"):
        return name.removesuffix("/weight"), value
    if "LayerNorm/" in name:
        return name.replace("/weight", "/gamma").replace("/bias", "/beta"), value
    if name.endswith("/weight"):
        return name.removesuffix("/weight") + "/kernel", value.T  # PyTorch's [out, in]
    return name, value


@pytest.fixture(scope="module")
def tf_small(hf_small, tmp_path_factory):
    """A TF1 checkpoint with google-research/bert's names, holding hf_small's weights."""
    directory = tmp_path_factory.mktemp("tf") / "uncased_L-2_H-64_A-4"
    directory.mkdir()
    variables = {}
    for name, value in hf_small[1].state_dict().items():
        found = tf_variable(name, value.numpy())
        if found is not None:
            variables[found[0]] = found[1]
    first = "bert/encoder/layer_0/attention/self/query/kernel"
    # Not parameters: the step and an Adam moment, as run_pretraining.py saves them.
    variables["global_step"] = np.int64(1000)
    variables[first + "/adam_m"] = np.zeros_like(variables[first])
    with tf.Graph().as_default():
        for name, value in variables.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(directory / "bert_model.ckpt"), write_meta_graph=False)
    written = tf.train.load_checkpoint(str(directory / "bert_model.ckpt"))
    assert set(written.get_variable_to_shape_map()) == set(variables)
    google_config = {
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",  # the original's tanh approximation
        "hidden_dropout_prob": 0.1,
        "initializer_range": 0.02,
        **SMALL,
    }
    (directory / "bert_config.json").write_text(json.dumps(google_config))
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return directory


def run_cli(*args):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "bertjax.convert", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_tf_import_matches_transformers(hf_small, tf_small, tmp_path):
    workdir = tmp_path / "w"
    import_export.import_checkpoint("tf", str(tf_small), str(workdir))
    config, params = restore(workdir)
    batch = make_batch(config.vocab_size, seed=2)
    mlm, nsp = our_logits(config, params, batch)
    want_mlm, want_nsp = hf_logits(hf_small[1], batch)
    mlm_diff = assert_close(mlm, want_mlm, 1e-4)
    nsp_diff = assert_close(nsp, want_nsp, 1e-4)
    print(f"TF import: MLM max abs diff {mlm_diff:.2e}, NSP {nsp_diff:.2e}")
    run_config = json.loads((workdir / "config.json").read_text())
    # "uncased_..." in the directory name says so, as google-research/bert checks it.
    assert run_config["data"]["do_lower_case"] is True
    assert run_config["data"]["max_chars_per_word"] == 200
    assert run_config["converted_from"]["global_step"] == 1000
    assert run_config["converted_from"]["ignored"] == [
        "bert/encoder/layer_0/attention/self/query/kernel/adam_m",
        "global_step",
    ]


@pytest.mark.integration
def test_pretraining_starts_from_a_converted_workdir(small_workdir, make_small_config, tmp_path):
    config = make_small_config()
    config.init_checkpoint = str(small_workdir)
    config.data.vocab_file = str(small_workdir / "vocab.txt")
    config.data.vocab_size = SMALL["vocab_size"]
    config.data.max_seq_length = 32
    for key in ("hidden_size", "num_attention_heads", "intermediate_size"):
        config.model[key] = SMALL[key]
    config.model.max_position_embeddings = SMALL["max_position_embeddings"]
    run = train.build_run(config, str(tmp_path / "run"))
    with jax.set_mesh(run.mesh):
        state = train.create_state(run)
    _, want = restore(small_workdir)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), y), state.params, want)


# --------------------------------------------------------------------------- bad input


def edit_json(path, **changes):
    values = json.loads(path.read_text())
    values.update(changes)
    path.write_text(json.dumps(values))


def edit_tensors(path, change):
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def outside_link(src):
    target = src.parent / "elsewhere.json"
    shutil.copyfile(src / "config.json", target)
    (src / "config.json").unlink()
    (src / "config.json").symlink_to(target)


def pickled_weights(src):
    (src / "model.safetensors").unlink()
    # Not even a valid pickle: reading it would fail differently.
    (src / "pytorch_model.bin").write_bytes(b"\x80\x04 never unpickled")


BAD_HF = {
    "missing config": (lambda s: (s / "config.json").unlink(), r"config\.json: missing"),
    "missing weights": (
        lambda s: (s / "model.safetensors").unlink(),
        r"model\.safetensors: missing",
    ),
    "missing vocab": (lambda s: (s / "vocab.txt").unlink(), r"vocab\.txt: missing"),
    "config does not fit the weights": (
        lambda s: edit_json(s / "config.json", intermediate_size=100),
        r"model\.safetensors: bert\.encoder\.layer\.0\.intermediate\.dense\.weight has shape "
        r"\[96, 64\], but .*config\.json implies \[100, 64\]",
    ),
    "unknown tensor": (
        lambda s: edit_tensors(
            s / "model.safetensors", lambda t: t.update({"classifier.weight": np.zeros((2, 64))})
        ),
        r"model\.safetensors: tensor 'classifier\.weight' is not one bertjax knows",
    ),
    "missing tensor": (
        lambda s: edit_tensors(
            s / "model.safetensors", lambda t: t.pop("bert.encoder.layer.1.output.dense.bias")
        ),
        r"model\.safetensors: missing tensor 'bert\.encoder\.layer\.1\.output\.dense\.bias'",
    ),
    "head half there": (
        lambda s: edit_tensors(
            s / "model.safetensors", lambda t: t.pop("cls.predictions.transform.dense.weight")
        ),
        r"missing tensor 'cls\.predictions\.transform\.dense\.weight'",
    ),
    "untied decoder": (
        lambda s: edit_tensors(
            s / "model.safetensors",
            lambda t: t.update({"cls.predictions.decoder.weight": np.ones((70, 64), np.float32)}),
        ),
        r"model\.safetensors: cls\.predictions\.decoder\.weight differs",
    ),
    "vocab smaller than the embeddings": (
        lambda s: (s / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB[:-1])),
        r"vocab\.txt: 69 entries, but bert\.embeddings\.word_embeddings\.weight in "
        r".*model\.safetensors has 70 rows",
    ),
    "roberta": (
        lambda s: edit_json(s / "config.json", model_type="roberta"),
        r"config\.json: model_type 'roberta' is not supported",
    ),
    "distilbert": (
        lambda s: (s / "config.json").write_text(
            json.dumps({"model_type": "distilbert", "dim": 64, "n_layers": 2, "n_heads": 4})
        ),
        r"config\.json: model_type 'distilbert' is not supported",
    ),
    "symlink out of the directory": (
        outside_link,
        r"src/config\.json: a symbolic link to .*elsewhere\.json, outside",
    ),
    "pickle": (pickled_weights, r"pytorch_model\.bin: a pickled PyTorch checkpoint.*safetensors"),
    "lower case unknown": (None, r"cannot tell whether the model is uncased.*--do_lower_case"),
}


@pytest.mark.parametrize("case", BAD_HF)
def test_bad_hugging_face_input_writes_nothing(hf_small, tmp_path, case):
    breaks, match = BAD_HF[case]
    src = tmp_path / "src"
    shutil.copytree(hf_small[0], src)
    if breaks is not None:
        breaks(src)
    out = tmp_path / "out"
    out.mkdir()
    do_lower_case = None if case == "lower case unknown" else True
    with pytest.raises(import_export.ConversionError, match=match):
        import_export.import_checkpoint("hf", str(src), str(out / "w"), do_lower_case=do_lower_case)
    check_no_output(out)


@pytest.mark.parametrize(
    "breaks, match",
    [
        (lambda s: (s / "bert_config.json").unlink(), r"bert_config\.json: missing"),
        (lambda s: (s / "bert_model.ckpt.index").unlink(), r"bert_model\.ckpt\.index: missing"),
        (
            lambda s: edit_json(s / "bert_config.json", num_attention_heads=3, hidden_size=63),
            r"bert_model\.ckpt: bert/embeddings/word_embeddings has shape \[70, 64\], but "
            r".*bert_config\.json implies \[70, 63\]",
        ),
        (
            lambda s: edit_json(s / "bert_config.json", num_hidden_layers=1),
            r"bert_model\.ckpt: tensor 'bert/encoder/layer_1/.*' is not one bertjax knows.*"
            r"num_hidden_layers=1",
        ),
    ],
    ids=["missing config", "missing checkpoint", "config does not fit", "too many layers"],
)
def test_bad_tf_input_writes_nothing(tf_small, tmp_path, breaks, match):
    src = tmp_path / tf_small.name
    shutil.copytree(tf_small, src)
    breaks(src)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(import_export.ConversionError, match=match):
        import_export.import_checkpoint("tf", str(src), str(out / "w"))
    check_no_output(out)


def test_tf_case_contradicting_the_name_fails(tf_small, tmp_path):
    with pytest.raises(import_export.ConversionError, match="--no_do_lower_case contradicts"):
        import_export.import_checkpoint(
            "tf", str(tf_small), str(tmp_path / "w"), do_lower_case=False
        )


def test_a_failure_while_writing_leaves_nothing(hf_small, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save", fail)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="disk full"):
        import_export.import_checkpoint(
            "hf", str(hf_small[0]), str(out / "deeper" / "w"), do_lower_case=True
        )
    assert not out.exists()


@pytest.mark.integration
def test_the_staging_folder_of_a_killed_export_goes_with_the_next_export(small_workdir, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    export = subprocess.Popen(
        [sys.executable, "-m", "bertjax.convert", "export", "--format", "savedmodel",
         str(small_workdir), str(out)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not list(tmp_path.glob(".out.*.partial")):
        assert export.poll() is None, "the export ended before it wrote its staging folder"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    export.kill()  # SIGKILL: no cleanup runs
    export.wait()
    assert list(tmp_path.glob(".out.*.partial"))
    # The next export, in this process: what it clears is the library's doing.
    import_export.export_hf(str(small_workdir), str(out))
    assert os.listdir(tmp_path) == ["out"]


def test_existing_destinations_are_refused(small_workdir, tmp_path):
    with pytest.raises(import_export.ConversionError, match="already exists and is not empty"):
        import_export.import_checkpoint("hf", "unused", str(small_workdir))
    with pytest.raises(import_export.ConversionError, match="already exists and is not empty"):
        import_export.export_hf(str(small_workdir), str(small_workdir))
    with pytest.raises(UserError, match="checkpoints/7: missing; steps there: 0"):
        import_export.export_hf(str(small_workdir), str(tmp_path / "o"), step=7)


# --------------------------------------------------------------------------- command line


@pytest.mark.integration
def test_cli_imports_with_positional_paths_and_flags_after_them(tf_small, tmp_path):
    result = run_cli(
        "import", "--format", "tf", str(tf_small), str(tmp_path / "w"), "--scan_layers"
    )
    assert result.returncode == 0, result.stderr
    assert "(2 layers, hidden 64" in result.stdout
    assert json.loads((tmp_path / "w" / "model_config.json").read_text())["scan_layers"] is True


@pytest.mark.integration
def test_cli_error_is_one_line_with_exit_code_2(small_workdir):
    result = run_cli("export", "--format", "hf", str(small_workdir), str(small_workdir))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "already exists and is not empty" in errors[0], result.stderr
    # Nothing else: no traceback, and none of TensorFlow's start-up lines (native_log.py).
    assert result.stderr.splitlines() == errors


@pytest.mark.integration
@pytest.mark.parametrize(
    "command", ["import hf", "export hf", "export sentence-transformers", "export savedmodel"]
)
def test_a_destination_below_a_file_is_one_line_before_anything_loads(
    hf_small, small_workdir, tmp_path, command
):
    (tmp_path / "afile").write_text("mine")
    out = tmp_path / "afile" / "sub"
    name, format = command.split()
    if name == "import":
        result = run_cli(name, "--format", format, str(hf_small[0]), str(out), "--do_lower_case")
    else:
        result = run_cli(name, "--format", format, str(small_workdir), str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: {out}: {tmp_path / 'afile'} is not a folder; choose another path"
    ]
    assert (tmp_path / "afile").read_text() == "mine"
    assert os.listdir(tmp_path) == ["afile"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "args,message",
    [
        (["import", "--format", "hf", "a"], "usage: python -m bertjax.convert import"),
        (["export", "--format", "tf", "a", "b"], "export writes --format hf or"),
        (
            ["import", "--format", "sentence-transformers", "a", "b"],
            "import reads --format tf or hf",
        ),
        (["import", "--format", "hf", "a", "b", "--step", "3"], "--step is an option of export"),
        (["convert", "--format", "hf", "a", "b"], "expected a command, import, export or shrink"),
        (
            ["export", "--format", "hf", "a", "b", "--max_seq_length", "64"],
            "--max_seq_length is an option of export --format savedmodel",
        ),
        (["export", "a", "b"], "export needs --format"),
        (["shrink", "a", "b"], "shrink needs --layers, e.g. --layers 0,2,4"),
        (["shrink", "--format", "hf", "a", "b", "--layers", "0"], "--format is an option of"),
        (
            ["export", "--format", "hf", "a", "b", "--layers", "0"],
            "--layers is an option of shrink",
        ),
    ],
    ids=[
        "one-path",
        "export-tf",
        "import-st",
        "step-on-import",
        "no-command",
        "length-on-hf",
        "no-format",
        "no-layers",
        "format-on-shrink",
        "layers-on-export",
    ],  # fmt: skip
)
def test_cli_usage_errors(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert message in error
