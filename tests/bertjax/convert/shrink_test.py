"""python -m bertjax.convert shrink: a workdir with some of another's encoder layers.

The oracle is the source model's own modules applied by hand: its embeddings, then its
layers l0, l1, ... in turn (each with its index in the source, which decides a
ModernBERT layer's attention), then its final LayerNorm. The shrunk workdir, restored as
a user restores it, must give the same hidden states, and every parameter outside the
encoder's layers must be the source's.
"""

import dataclasses
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from flax import traverse_util

from bertjax import checkpoint, inference
from bertjax import workdir as workdir_lib
from bertjax.convert import shrink
from bertjax.convert.errors import ConversionError
from bertjax.model import (
    BertConfig,
    BertEmbeddings,
    BertForPreTraining,
    BertLayer,
    _layer_norm,
    position_ids,
)
from bertjax.tasks import pretraining
from experiments.pretrain import tiny_cpu

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [f"w{i}" for i in range(43)]
BERT = BertConfig(
    vocab_size=len(SPECIALS) + len(WORDS),
    hidden_size=16,
    num_hidden_layers=4,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=32,
    initializer_range=0.5,  # layers far from the identity, so that each one shows
)
# Layers 0 and 3 global, the others local with windows of 4 tokens: the inputs are longer.
MODERNBERT = dataclasses.replace(
    BERT,
    num_hidden_layers=6,
    norm_placement="pre",
    use_bias=False,
    feed_forward="geglu",
    hidden_act="gelu",
    position_embedding="rotary",
    rope_theta=160000.0,
    local_rope_theta=1000.0,
    global_attention_every=3,
    local_attention_window=4,
    type_vocab_size=0,
    pooler="norm",
    layer_norm_eps=1e-5,
)


def write_source(folder, config: BertConfig, seed: int = 0) -> str:
    """A pretraining workdir of `config`, randomly initialized (its step 0)."""
    vocab = folder / "v.txt"
    vocab.write_text("".join(t + "\n" for t in [*SPECIALS, *WORDS]))
    run_config = tiny_cpu.get_config()
    run_config.data.vocab_file = str(vocab)
    run_config.data.next_sentence_prediction = config.type_vocab_size > 0
    workdir = str(folder / "src")
    workdir_lib.write_run_description(
        workdir,
        run_config,
        config,
        str(vocab),
        kind="pretraining",
        description=pretraining.describe(run_config.data).to_json(),
    )
    ids = jnp.zeros((1, 4), jnp.int32)
    model = BertForPreTraining(config, next_sentence=config.type_vocab_size > 0)
    init = jax.jit(functools.partial(model.init, deterministic=True))
    params = init(jax.random.key(seed), ids, ids, ids, ids[:, :1])
    with checkpoint.make_manager(workdir, max_to_keep=1) as manager:
        checkpoint.save(manager, 0, {"params": nn.meta.unbox(params["params"])}, data={})
    return workdir


def inputs(length: int = 20):
    rng = np.random.default_rng(0)
    ids = rng.integers(len(SPECIALS), len(SPECIALS) + len(WORDS), size=(2, length))
    mask = np.ones((2, length), np.int32)
    mask[1, 13:] = 0
    return jnp.asarray(ids, jnp.int32), jnp.asarray(mask)


def by_hand(config: BertConfig, bert: dict, layers, ids, mask):
    """The source's embeddings, then its layers `layers`, then its final LayerNorm."""
    segments = jnp.zeros_like(ids)
    x = BertEmbeddings(config).apply(
        {"params": bert["embeddings"]}, ids, mask, segments, deterministic=True
    )
    positions = position_ids(mask)
    for layer in layers:
        x, _ = BertLayer(config).apply(
            {"params": bert["encoder"][f"layer_{layer}"]}, x, mask, positions, layer, True
        )
    if config.norm_placement == "pre":
        x = _layer_norm(config).apply({"params": bert["encoder"]["final_LayerNorm"]}, x)
    return x


def sequence_output(restored, ids, mask):
    return restored.model.apply(
        {"params": restored.params},
        ids,
        mask,
        jnp.zeros_like(ids),
        deterministic=True,
        method=lambda model, *args, **kwargs: model.bert.sequence_output(*args, **kwargs),
    )


@pytest.mark.slow  # a checkpoint written, shrunk and restored twice: 10 s of CPU the first time
@pytest.mark.parametrize(
    "config, layers, every",
    [
        (BERT, (0, 2, 3), 1),
        (BERT, (1,), 1),
        (MODERNBERT, (0, 1, 2), 3),  # global, local, local: as the source's first three
        (MODERNBERT, (0, 2, 4), 3),  # global, local, local
        (MODERNBERT, (0, 3), 1),  # both global
        (MODERNBERT, (0, 1, 3, 4), 2),  # global, local, global, local
    ],
    ids=["bert-0,2,3", "bert-1", "modern-0,1,2", "modern-0,2,4", "modern-0,3", "modern-0,1,3,4"],
)
def test_the_shrunk_workdir_computes_what_its_kept_layers_compute_in_the_source(
    tmp_path, config, layers, every
):
    src = write_source(tmp_path, config)
    out = str(tmp_path / "out")
    result = shrink.shrink(src, out, ",".join(map(str, layers)))

    source, student = inference.restore(src), inference.restore(out)
    assert student.config.num_hidden_layers == len(layers)
    assert student.config.global_attention_every == every
    assert result["layers"] == layers and result["kind"] == student.kind == "pretraining"
    ids, mask = inputs()
    want = by_hand(config, source.params["bert"], layers, ids, mask)
    got = sequence_output(student, ids, mask)
    valid = np.asarray(mask, bool)
    np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(want)[valid], atol=1e-5)
    # Without its layers in the source's order, the same model computes something else.
    if len(layers) > 1:
        other = by_hand(config, source.params["bert"], layers[::-1], ids, mask)
        assert not np.allclose(np.asarray(got)[valid], np.asarray(other)[valid], atol=1e-2)

    flat_source = traverse_util.flatten_dict(source.params, sep="/")
    flat_student = traverse_util.flatten_dict(student.params, sep="/")
    for name, value in flat_student.items():
        if "/encoder/layer_" in name:
            j = int(name.split("/encoder/layer_")[1].split("/")[0])
            name = name.replace(f"/layer_{j}/", f"/layer_{layers[j]}/")
        np.testing.assert_array_equal(value, flat_source[name], err_msg=name)
    assert result["parameters"] == (
        sum(x.size for x in flat_source.values()),
        sum(x.size for x in flat_student.values()),
    )
    saved = json.loads((tmp_path / "out" / workdir_lib.CONFIG_FILE).read_text())
    assert saved["shrunk_from"] == {"workdir": src, "step": 0, "layers": list(layers)}
    assert sorted(os.listdir(tmp_path)) == ["out", "src", "v.txt"]  # no staging folder left


def test_a_modernbert_selection_whose_attention_no_config_can_hold_is_refused(tmp_path):
    src = write_source(tmp_path, MODERNBERT)
    for layers in ("0,3,4", "1,2"):
        with pytest.raises(ConversionError, match=f"--layers='{layers}': their attention"):
            shrink.shrink(src, str(tmp_path / "out"), layers)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "layers, why",
    [
        ("", "list the layers to keep"),
        ("0,a", "list the layers to keep"),
        ("-1", "list the layers to keep"),
        ("2,1", "in increasing order"),
        ("1,1", "in increasing order"),
        ("0,4", "has 4 layers, 0 to 3"),
    ],
)
def test_bad_layers_are_refused_in_one_line(tmp_path, layers, why):
    src = write_source(tmp_path, BERT)
    with pytest.raises(ConversionError, match=why) as error:
        shrink.shrink(src, str(tmp_path / "out"), layers)
    assert "\n" not in str(error.value) and f"--layers={layers!r}" in str(error.value)
    assert not (tmp_path / "out").exists()
