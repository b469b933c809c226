"""The notebook API: restore (one device or a mesh, any training layout) and its helpers."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from support import REPO, readme
from support.finetuned import finetuned_workdir

import bertjax
from bertjax import checkpoint, inference, sharding, train

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sharded_scan_run(pretrained_run):
    """(config, workdir) of conftest.py's run: 4 steps of a scan_layers model trained over an
    8-device data x fsdp x tensor mesh. Read only."""
    return pretrained_run.config, pretrained_run.workdir


def _saved_params(config, workdir):
    run = train.build_run(config, workdir)
    manager = checkpoint.make_manager(workdir, max_to_keep=2)
    state, _ = checkpoint.restore(manager, 4, run.abstract_state)
    manager.close()
    return jax.tree.map(np.asarray, state.params)


def test_restore_puts_a_multi_device_scan_run_on_one_device_in_loop_layout(sharded_scan_run):
    config, workdir = sharded_scan_run
    restored = bertjax.restore(workdir)
    assert restored.step == 4 and not restored.config.scan_layers
    encoder = restored.params["bert"]["encoder"]
    assert sorted(encoder) == ["layer_0", "layer_1"]
    device = jax.local_devices()[0]
    for leaf in jax.tree.leaves(restored.params):
        assert leaf.sharding.device_set == {device}
    saved = _saved_params(config, workdir)
    stacked = saved["bert"]["encoder"]["layer"]
    for i in range(2):
        jax.tree.map(
            lambda a, b, i=i: np.testing.assert_array_equal(np.asarray(a), b[i]),
            encoder[f"layer_{i}"],
            stacked,
        )
    np.testing.assert_array_equal(
        np.asarray(restored.params["bert"]["embeddings"]["word_embeddings"]["embedding"]),
        saved["bert"]["embeddings"]["word_embeddings"]["embedding"],
    )


def test_restore_over_a_mesh_splits_the_parameters(sharded_scan_run):
    config, workdir = sharded_scan_run
    mesh = sharding.make_mesh({"data": 1, "fsdp": 4, "tensor": 2})
    on_mesh = bertjax.restore(workdir, mesh=mesh)
    single = bertjax.restore(workdir)
    embedding = on_mesh.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert len(embedding.sharding.device_set) == 8
    assert embedding.addressable_shards[0].data.shape == (config.data.vocab_size // 2, 64 // 4)
    texts = ["The with statement closes the file.", "A list is mutable."]
    np.testing.assert_allclose(
        bertjax.embed(on_mesh, texts), bertjax.embed(single, texts), rtol=1e-5, atol=1e-5
    )


def test_encode_is_independent_of_padding_and_batch(sharded_scan_run):
    _, workdir = sharded_scan_run
    restored = bertjax.restore(workdir)
    short, long = "A tuple.", "The try statement specifies exception handlers for a group."
    both = bertjax.encode(restored, [short, long])
    alone = bertjax.encode(restored, [short])
    n = int(alone["input_mask"].sum())
    assert both["sequence_output"].shape[:2] == both["input_ids"].shape
    assert both["input_mask"][0].sum() == n < both["input_mask"][1].sum()
    np.testing.assert_allclose(
        both["sequence_output"][0, :n], alone["sequence_output"][0, :n], atol=1e-5
    )
    np.testing.assert_allclose(both["pooled_output"][0], alone["pooled_output"][0], atol=1e-5)
    vocab = restored.tokenizer.vocab
    assert both["input_ids"][0, 0] == vocab.cls_id and both["input_ids"][0, n - 1] == vocab.sep_id

    mean = bertjax.embed(restored, [short])
    np.testing.assert_allclose(mean[0], alone["sequence_output"][0, :n].mean(0), rtol=1e-5)
    np.testing.assert_allclose(
        bertjax.embed(restored, [short], pooling="cls")[0],
        alone["sequence_output"][0, 0],
        atol=1e-5,
    )
    with pytest.raises(ValueError, match="pooling='max'"):
        bertjax.embed(restored, [short], pooling="max")
    with pytest.raises(TypeError, match="list of texts"):
        bertjax.encode(restored, short)
    with pytest.raises(ValueError, match="text 0 is .* tokens"):
        bertjax.encode(restored, ["word " * 100])


def test_a_few_texts_are_embedded_in_a_batch_of_as_few_rows(sharded_scan_run, monkeypatch):
    # Not padded to batch_size rows: 3 texts run as 4, 64 as 64, the rest of 70 as 8.
    restored = bertjax.restore(sharded_scan_run[1])
    shapes, embed_batch = [], inference._embed_batch

    def spy(module, params, input_ids, input_mask):
        shapes.append(input_ids.shape[0])
        return embed_batch(module, params, input_ids, input_mask)

    monkeypatch.setattr(inference, "_embed_batch", spy)
    texts = [f"The statement number {i}." for i in range(70)]
    few = bertjax.embed(restored, texts[:3])
    assert shapes == [4]
    shapes.clear()
    many = bertjax.embed(restored, texts)
    assert shapes == [64, 8]
    np.testing.assert_allclose(few, many[:3], atol=1e-5)


def test_pairs_get_segment_ids_and_next_sentence_is_a_probability(sharded_scan_run):
    _, workdir = sharded_scan_run
    restored = bertjax.restore(workdir)
    out = bertjax.encode(restored, ["First part."], pairs=["Second part."])
    ids, segments = out["input_ids"][0], out["segment_ids"][0]
    sep = restored.tokenizer.vocab.sep_id
    first_sep = int(np.argmax(ids == sep))
    assert (segments[: first_sep + 1] == 0).all() and (segments[first_sep + 1 :] == 1).all()
    p = bertjax.next_sentence(restored, "First part.", "Second part.")
    assert 0.0 < p < 1.0


def test_attention_maps_are_distributions_over_the_text(sharded_scan_run):
    _, workdir = sharded_scan_run
    restored = bertjax.restore(workdir)
    maps, tokens = inference.attention_maps(restored, "The pass statement does nothing.")
    assert maps.shape == (2, 2, len(tokens), len(tokens))
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=1e-5)


def test_restore_imports_no_trainer_code():
    # The notebook API reads workdirs through workdir.py and the task table alone (the
    # tasks check their configs' schedules with optim.py, which is not the loop).
    code = (
        "import sys, bertjax; bertjax.restore; "
        "print(sorted(m for m in ('bertjax.train', 'bertjax.metrics') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


def test_a_workdir_written_before_an_option_existed_still_restores(sharded_scan_run, tmp_path):
    # Workdirs (and `bertjax.convert import` output) written before packing have no
    # pack_examples or max_sequences_per_row among their saved tokenizer settings.
    _, workdir = sharded_scan_run
    older = tmp_path / "older"
    shutil.copytree(workdir, older, ignore=shutil.ignore_patterns(".lock"))
    task = json.loads((older / "task.json").read_text())
    for key in ("pack_examples", "max_sequences_per_row"):
        del task["tokenizer_data"][key]
    (older / "task.json").write_text(json.dumps(task))
    restored = bertjax.restore(str(older))
    text = ["The pass statement does nothing."]
    np.testing.assert_allclose(
        inference.encode(restored, text)["pooled_output"],
        inference.encode(bertjax.restore(workdir), text)["pooled_output"],
        rtol=1e-5,
    )


def test_sigterm_after_a_restore_ends_the_process_without_a_stack_trace(sharded_scan_run):
    # As Jupyter stops a kernel slow to exit. With libtpu installed (to compile for TPUs),
    # jax's start would otherwise leave libtpu's crash reporter on SIGTERM, a page of trace.
    code = (
        "import os, signal, sys, time, bertjax\n"
        f"bertjax.restore({sharded_scan_run[1]!r})\n"
        "print('restored', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(30)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert (result.returncode, result.stdout) == (-15, "restored\n")
    assert "SIGTERM received" not in result.stderr, result.stderr[-2000:]


# What a user asks the API for after the README's notebook step (a fine-tuned workdir's
# labels), then an error of TensorFlow's own, written as its C++ code writes: it must show.
REAL_ERROR = "E0000 00:00:1795764449.333235     954 some_op.cc:12] INTERNAL: a real failure"
ASKED_FOR = """
[label] = bertjax.classify(bertjax.restore({classifier!r}), ["A list is mutable."])
print(vectors.shape[0], sorted(label["probabilities"]))
import os
os.write(2, {error!r})
"""


def test_the_notebook_api_in_a_script_writes_only_real_errors_to_stderr(
    sharded_scan_run, minilm_workdir, tmp_path
):
    # The README's notebook step run as a script, TF_CPP_MIN_LOG_LEVEL unset: TensorFlow,
    # XLA and CUDA write seven start-up lines straight to descriptor 2 while they load.
    (tmp_path / "demo_out").symlink_to(sharded_scan_run[1])
    classifier = finetuned_workdir(minilm_workdir, tmp_path, "classification")
    (snippet,) = readme.python_snippets()
    code = snippet + ASKED_FOR.format(classifier=classifier, error=f"{REAL_ERROR}\n".encode())
    unset = ("TF_CPP_MIN_LOG_LEVEL", "BERTJAX_VERBOSE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,  # descriptor 2 itself, as a terminal would get it
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "2 ['negative', 'positive']\n"
    assert result.stderr == f"{REAL_ERROR}\n"
