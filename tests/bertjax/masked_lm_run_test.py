"""A short pretraining run with ModernBERT's objective and recipe: masked LM alone at 30%
(scored at 15%), StableAdamW under a warmup-stable-decay schedule, then restored."""

import json
import os

import jax
import numpy as np
import pytest
import support

from bertjax import inference, optim, train
from bertjax.convert import import_export
from experiments.finetune import classify

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def masked_lm_run(tmp_path_factory, make_small_config):
    """8 steps of masked LM alone under the WSD schedule: (workdir, config), read only."""
    config = make_small_config()
    config.data.next_sentence_prediction = False
    config.data.masked_lm_prob = 0.3
    config.data.eval_masked_lm_prob = 0.15
    config.data.max_predictions_per_seq = 20  # 64 * 0.3 = 19.2
    config.optimizer.name = "stable_adamw"
    config.optimizer.schedule = "warmup_stable_decay"
    config.optimizer.decay_steps = 4
    config.optimizer.decay_shape = "1-sqrt"
    config.checkpoint_every_steps = 0  # the last step's alone: the tests read that one
    workdir = str(tmp_path_factory.mktemp("masked_lm") / "run")
    train.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    return workdir, config


def test_a_masked_lm_run_without_nsp_under_the_wsd_schedule(tmp_path, masked_lm_run):
    workdir, config = masked_lm_run
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    train_lines = [m for m in lines if m["split"] == "train"]
    assert [m["step"] for m in train_lines] == [2, 4, 6, 8]
    for m in lines:
        assert not [key for key in m if key.startswith("nsp")], m
        assert np.isfinite(m["mlm_loss"]) and m["loss"] == m["mlm_loss"]
    # Warmup over 2 steps, the peak until step 4, then 1 - sqrt over the last 4 steps; a
    # line shows the rate of its last step, counted from 0 (1, 3, 5, 7).
    peak = config.optimizer.learning_rate
    expected = [peak / 2, peak, peak * (1 - np.sqrt(0.25)), peak * (1 - np.sqrt(0.75))]
    np.testing.assert_allclose([m["learning_rate"] for m in train_lines], expected, rtol=1e-5)
    schedule = optim.learning_rate_schedule(config.optimizer, config.num_train_steps)
    assert float(schedule(config.num_train_steps)) == 0.0

    restored = inference.restore(workdir)
    assert restored.model.next_sentence is False
    assert "seq_relationship" not in restored.params
    assert "pooler" not in restored.params["bert"]
    assert inference.embed(restored, ["the river"]).shape == (1, 64)
    with pytest.raises(ValueError, match="masked LM alone"):
        inference.next_sentence(restored, "The river.", "The town.")

    # Fine-tuning a classifier from it: the encoder comes from the checkpoint, the pooler
    # (which masked LM alone never trained) starts fresh, as RoBERTa's and ModernBERT's.
    finetune = classify.get_config()
    finetune.init_checkpoint = workdir
    finetune.train_batch_size = finetune.eval_batch_size = 8
    finetune.num_train_epochs = 2.0  # 4 examples x 2 epochs / 8 = 1 step
    mrpc = support.TESTDATA / "finetune"
    finetune.data.train_file = str(mrpc / "mrpc_train.tsv")
    finetune.data.eval_file = str(mrpc / "mrpc_dev.tsv")
    finetune.data.text_a, finetune.data.text_b = "#1 String", "#2 String"
    finetune.data.label = "Quality"
    finetune.data.max_seq_length = 32
    run = train.build_run(finetune, str(tmp_path / "mrpc"), devices=jax.devices()[:1])
    assert run.setup.init.fresh == ("bert/pooler",)
    with jax.set_mesh(run.mesh):
        state = train.create_state(run)
    np.testing.assert_array_equal(
        state.params["bert"]["embeddings"]["word_embeddings"]["embedding"],
        restored.params["bert"]["embeddings"]["word_embeddings"]["embedding"],
    )
    assert set(state.params["bert"]["pooler"]) == {"dense"}
    results = train.train_and_evaluate(finetune, str(tmp_path / "mrpc"), devices=jax.devices()[:1])
    assert 0.0 <= results["eval"]["accuracy"] <= 1.0


def test_a_masked_lm_bert_exports_as_bert_for_masked_lm(tmp_path, masked_lm_run):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    workdir, _ = masked_lm_run
    result = import_export.export_hf(workdir, str(tmp_path / "exported"))
    assert result["class"] == "BertForMaskedLM"
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(
        str(tmp_path / "exported"), output_loading_info=True
    )
    assert type(model).__name__ == "BertForMaskedLM" and not any(info.values()), info
    restored = inference.restore(workdir)
    ours = inference.encode(restored, ["The river runs past the town."])
    everywhere = np.arange(ours["input_ids"].shape[1], dtype=np.int32)[None]
    mlm, _ = restored.model.apply(
        {"params": restored.params},
        ours["input_ids"],
        ours["input_mask"],
        ours["segment_ids"],
        everywhere,
        deterministic=True,
    )
    inputs = {
        "input_ids": torch.tensor(ours["input_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(ours["input_mask"]),
        "token_type_ids": torch.tensor(ours["segment_ids"], dtype=torch.long),
    }
    with torch.no_grad():
        theirs = model.eval()(**inputs).logits.numpy()
    np.testing.assert_allclose(np.asarray(mlm), theirs, atol=1e-4)
