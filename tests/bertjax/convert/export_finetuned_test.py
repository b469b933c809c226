"""`bertjax.convert export --format hf` of fine-tuned workdirs: each task's model as its
transformers class, with its labels, and a tokenizer that tokenizes as the run did.

The workdirs are all-MiniLM-L6-v2's encoder (its real weights and the
bert-base-uncased vocabulary) under a random head, saved with the description a
fine-tuning run writes. The oracles are transformers' Auto classes in eval mode,
loading the export as a user would.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
from support import REPO
from support.finetuned import HEADS, finetuned_workdir

import bertjax
from bertjax import workdir as workdir_lib
from bertjax.convert import import_export
from bertjax.model import (
    BertConfig,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Café résumé: naïve Ångström measurements (unbelievably) precise!",
    # 150 characters: one word under the original's 200-character limit, over transformers'
    # default of 100, so only a tokenizer that states the limit keeps it out of [UNK].
    "supercalifragilistic" * 7 + "expialidocious!",
]
PAIRS = ["Where does it jump?", "Is it precise?", "中文 and spaces\tand\ttabs"]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(HEADS))
def test_an_exported_head_gives_bertjaxs_tokens_and_logits_in_transformers(
    minilm_workdir, tmp_path, case
):
    workdir = finetuned_workdir(minilm_workdir, tmp_path, case)
    out = tmp_path / "exported"
    result = import_export.export_hf(workdir, str(out))
    head, labels, auto = HEADS[case]
    assert (result["step"], result["class"]) == (3, head.__name__)

    load = getattr(transformers, auto).from_pretrained
    model, info = load(str(out), output_loading_info=True)
    assert not any(info.values()), info
    assert type(model).__name__ == head.__name__  # ours are named as transformers' are
    if labels:
        assert model.config.id2label == dict(enumerate(labels))
        assert model.config.label2id == {name: i for i, name in enumerate(labels)}
    if case == "regression":
        assert (model.config.num_labels, model.config.problem_type) == (1, "regression")

    restored = bertjax.restore(workdir)
    ours = bertjax.encode(restored, TEXTS, PAIRS)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    theirs = tokenizer(TEXTS, PAIRS, padding=True, return_tensors="np")
    np.testing.assert_array_equal(theirs["input_ids"], ours["input_ids"])
    np.testing.assert_array_equal(theirs["token_type_ids"], ours["segment_ids"])
    np.testing.assert_array_equal(theirs["attention_mask"], ours["input_mask"])
    assert restored.tokenizer.vocab.unk_id not in ours["input_ids"][2]

    got = restored.apply(ours)
    with torch.no_grad():
        output = model.eval()(**{k: torch.tensor(v, dtype=torch.long) for k, v in theirs.items()})
    want = (output.start_logits, output.end_logits) if case == "squad" else (output.logits,)
    got = got if case == "squad" else (got,)
    real = ours["input_mask"].astype(bool)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), w.numpy()
        if case in ("tagging", "squad"):  # padding positions are the models' own business
            g, w = g[real], w[real]
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=0)
        print(f"{case}: max abs logit difference {np.max(np.abs(g - w)):.2e}")


def run_export(workdir, out) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "bertjax.convert", "export", "--format", "hf"]
    return subprocess.run(
        [*command, str(workdir), str(out)], cwd=REPO, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "model_config, kind, error",
    [
        (
            BertConfig(
                num_hidden_layers=1, hidden_size=8, num_attention_heads=2, intermediate_size=16
            ).to_dict(),
            "my.module:TASK",
            "{task}: a my.module:TASK workdir; export writes the models of pretraining, "
            "classification, tagging, squad, reranking workdirs",
        ),
        (
            {"vocab_size": 10},
            "classification",
            "{model}: missing BertConfig field(s): hidden_size, intermediate_size, "
            "num_attention_heads, num_hidden_layers",
        ),
    ],
    ids=["custom_task", "incomplete_model_config"],
)
def test_a_workdir_that_cannot_be_exported_is_refused_by_its_file(
    tmp_path, model_config, kind, error
):
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / workdir_lib.MODEL_CONFIG_FILE).write_text(json.dumps(model_config))
    (workdir / workdir_lib.TASK_FILE).write_text(json.dumps({"kind": kind}))
    result = run_export(workdir, tmp_path / "out")
    assert result.returncode == 2, result.stderr
    paths = {
        "task": workdir / workdir_lib.TASK_FILE,
        "model": workdir / workdir_lib.MODEL_CONFIG_FILE,
    }
    assert result.stderr.splitlines() == ["error: " + error.format(**paths)]
    assert not (tmp_path / "out").exists()


def test_a_task_of_ones_own_exports_only_when_it_declares_its_transformers_class(
    tmp_path, monkeypatch
):
    # An importable task without `hf_class` (the contract's default) is refused in one line,
    # as a shipped task's workdir would be were its `hf_class` taken away.
    (tmp_path / "my_tasks.py").write_text(
        "import dataclasses\n"
        "from bertjax.tasks import classification\n"
        "TASK = dataclasses.replace(classification.TASK, hf_class=None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    workdir = tmp_path / "w"
    workdir.mkdir()
    config = BertConfig(
        num_hidden_layers=1, hidden_size=8, num_attention_heads=2, intermediate_size=16
    )
    (workdir / workdir_lib.MODEL_CONFIG_FILE).write_text(json.dumps(config.to_dict()))
    (workdir / workdir_lib.TASK_FILE).write_text(json.dumps({"kind": "my_tasks:TASK"}))
    with pytest.raises(
        import_export.ConversionError,
        match=r"task.json: a my_tasks:TASK workdir; export writes the models of pretraining, "
        "classification, tagging, squad, reranking workdirs$",
    ):
        import_export.export_hf(str(workdir), str(tmp_path / "out"))
