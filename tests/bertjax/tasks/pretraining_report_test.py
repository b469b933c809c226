"""Restoring a workdir, fill-mask, and the end-of-run report."""

import io
import shutil

import jax
import numpy as np
import pytest
import tensorflow as tf

from bertjax import checkpoint, inference, train
from bertjax import workdir as workdir_lib
from bertjax.model import unstack_layers
from bertjax.tasks import pretraining_report

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def trained(pretrained_run):
    """(config, workdir, last eval) of conftest.py's 4-step pretraining run, read only."""
    return pretrained_run.config, pretrained_run.workdir, pretrained_run.results["eval"]


def test_fill_mask_gives_top_k_per_mask(trained):
    _, workdir, _ = trained
    restored = inference.restore(workdir)
    assert restored.step == 4
    guesses = pretraining_report.fill_mask(
        restored, "The [MASK] statement raises an [MASK].", top_k=3
    )
    assert len(guesses) == 2 and all(len(g) == 3 for g in guesses)
    for g in guesses:
        probs = [p for _, p in g]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
        assert all(token in restored.tokenizer.vocab.tokens for token, _ in g)
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        pretraining_report.fill_mask(restored, "nothing to fill")


def test_fill_mask_pads_its_text_without_changing_the_guesses(trained):
    # fill_mask pads the text to a power of two and masks the padding out: its guesses
    # are those of the model run on the text's tokens alone.
    _, workdir, _ = trained
    restored = inference.restore(workdir)
    vocab = restored.tokenizer.vocab
    before, after = restored.tokenizer.tokenize(tf.constant(["The", "statement."])).to_list()
    ids = np.asarray([[vocab.cls_id, *before, vocab.mask_id, *after, vocab.sep_id]], np.int32)
    assert ids.shape[1] & (ids.shape[1] - 1)  # not a power of two: fill_mask pads it
    logits, _ = restored.model.apply(
        {"params": restored.params},
        ids,
        np.ones_like(ids),
        np.zeros_like(ids),
        np.asarray([[1 + len(before)]], np.int32),
        deterministic=True,
    )
    probs = np.asarray(jax.nn.softmax(logits[0, 0]))
    best = np.argsort(-probs)[:5]
    (guesses,) = pretraining_report.fill_mask(restored, "The [MASK] statement.", top_k=5)
    assert [token for token, _ in guesses] == [vocab.tokens[i] for i in best]
    np.testing.assert_allclose([p for _, p in guesses], probs[best], rtol=1e-5, atol=1e-7)


def test_fill_mask_matches_the_training_forward_pass(trained):
    # The restored parameters are the checkpoint's: the same logits as a
    # direct apply with the parameters read through the training code path
    # (which keeps the run's scan layout; restore gives the loop layout).
    config, workdir, _ = trained
    restored = inference.restore(workdir)
    run = train.build_run(config, workdir)
    manager = checkpoint.make_manager(workdir, max_to_keep=2)
    state, _ = checkpoint.restore(manager, 4, run.abstract_state)
    manager.close()
    saved = {**state.params, "bert": unstack_layers(state.params["bert"], 2)}
    jax.tree.map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
        restored.params,
        saved,
    )


def test_report_prints_accuracy_baselines_and_guesses(trained):
    config, workdir, last_eval = trained
    out = io.StringIO()
    pretraining_report.print_report(
        inference.restore(workdir), config, last_eval, fill_mask_examples=2, out=out
    )
    text = out.getvalue()
    assert "held-out MLM accuracy" in text and "baseline" in text
    assert "held-out NSP accuracy" in text
    assert text.count("answer ") == 2 and "top 5:" in text


def test_restore_names_what_the_workdir_lacks(trained, tmp_path):
    _, workdir, _ = trained
    with pytest.raises(checkpoint.CheckpointError, match="model_config.json"):
        inference.restore(str(tmp_path))
    for name in (workdir_lib.CONFIG_FILE, workdir_lib.MODEL_CONFIG_FILE):
        shutil.copy(f"{workdir}/{name}", tmp_path / name)
    with pytest.raises(checkpoint.CheckpointError, match="no task.json"):
        inference.restore(str(tmp_path))
    shutil.copy(f"{workdir}/{workdir_lib.TASK_FILE}", tmp_path / workdir_lib.TASK_FILE)
    with pytest.raises(checkpoint.CheckpointError, match="no vocabulary"):
        inference.restore(str(tmp_path))


def test_report_without_evaluation_or_held_out_text(trained):
    # The report of a run that never evaluated, on a corpus with nothing held out.
    config, workdir, _ = trained
    config = config.copy_and_resolve_references()
    config.eval_every_steps = 0
    config.data.eval_fraction = 0.0
    out = io.StringIO()
    pretraining_report.print_report(
        inference.restore(workdir), config, {}, fill_mask_examples=2, out=out
    )
    assert out.getvalue() == (
        "\nno held-out evaluation (config.eval_every_steps=0)\n"
        "\nno held-out sentences to fill (config.data.eval_fraction=0.0)\n"
    )
