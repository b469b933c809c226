"""bertjax.flops: the analytic FLOPs count, the peak table, the CPU probe's cache, and MFU
in a real training run's metrics."""

import dataclasses
import json
import os
import re
import types

import jax
import jax.numpy as jnp
import pytest

from bertjax import flops, tasks, train
from bertjax import model as model_lib
from bertjax.tasks.contract import Description


def fake_devices(kind: str, count: int, platform: str = "gpu"):
    return [
        types.SimpleNamespace(platform=platform, device_kind=kind, process_index=0)
        for _ in range(count)
    ]


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    """An empty cache directory, and no figure measured yet in this process."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(flops, "_measured", {})
    return tmp_path / "cache" / "bertjax" / "cpu_peak_flops.json"


# ------------------------------------------------------------------------------ FLOPs

# L=2, H=8, A=2 (head size 4), I=16, V=32.
TINY = model_lib.BertConfig(
    num_hidden_layers=2,
    hidden_size=8,
    num_attention_heads=2,
    intermediate_size=16,
    vocab_size=32,
    max_position_embeddings=16,
)


def step_flops(kind: str, c, inputs: dict, batch_size: int, num_labels: int = 0) -> float:
    """flops.flops_per_step of a run of the task `kind` with these model inputs."""
    setup = types.SimpleNamespace(
        model=types.SimpleNamespace(config=c, inputs=inputs),
        description=Description(
            inputs["input_ids"], {"next_sentence_prediction": True}, num_labels=num_labels
        ),
        teacher=None,
    )
    return flops.flops_per_step(tasks.get(kind), setup, batch_size)


def pretraining_inputs(length: int, predictions: int, **more) -> dict:
    return {
        **dict.fromkeys(("input_ids", "input_mask", "segment_ids"), length),
        "masked_lm_positions": predictions,
        **more,
    }


def hand_count(matmuls, batch_size: int) -> float:
    """3 (forward and backward) x 2 FLOPs per multiply-add of [m, k] x [k, n] matmuls,
    given per sequence as (m, k, n, how many)."""
    return 3 * batch_size * sum(2 * m * k * n * times for m, k, n, times in matmuls)


def layer_matmuls(length: int, queries: int):
    return [
        (length, 8, 8, 2),  # key and value projections
        (queries, 8, 8, 2),  # query and output projections
        (queries, 4, length, 2),  # scores, per head
        (queries, length, 4, 2),  # probabilities x values, per head
        (queries, 8, 16, 1),  # intermediate
        (queries, 16, 8, 1),  # output
    ]


def encoder_matmuls(length: int, last_queries: int | None = None):
    """Two layers; the last computes `last_queries` positions (pretraining's heads' ones)."""
    last = length if last_queries is None else last_queries
    return layer_matmuls(length, length) + layer_matmuls(length, last)


PRETRAINING_HEADS = [
    (1, 8, 8, 1),  # pooler on [CLS]
    (1, 8, 2, 1),  # next-sentence classifier
    (2, 8, 8, 1),  # MLM dense at the masked positions only
    (2, 8, 32, 1),  # MLM logits against the tied embeddings
]


def test_pretraining_count_is_the_hand_count():
    # Sequences of 4 with 2 masked positions each, 3 of them: the last layer's queries
    # are [CLS] and the 2 masked positions.
    matmuls = encoder_matmuls(4, last_queries=3) + PRETRAINING_HEADS
    counted = step_flops("pretraining", TINY, pretraining_inputs(4, 2), 3)
    assert counted == hand_count(matmuls, 3)


@pytest.mark.parametrize(
    "untrimmed", [dict(scan_layers=True), dict(trim_last_layer=False)], ids=["scanned", "off"]
)
def test_an_untrimmed_encoder_counts_its_whole_last_layer(untrimmed):
    whole = dataclasses.replace(TINY, **untrimmed)
    matmuls = encoder_matmuls(4) + PRETRAINING_HEADS
    counted = step_flops("pretraining", whole, pretraining_inputs(4, 2), 3)
    assert counted == hand_count(matmuls, 3)


def test_a_packed_pretraining_row_counts_the_next_sentence_head_per_slot():
    # Rows of 4 tokens holding up to 3 sentence pairs, 2 masked positions a row.
    inputs = pretraining_inputs(4, 2, cls_positions=3)
    matmuls = encoder_matmuls(4, last_queries=3 + 2) + [
        (3, 8, 8, 1),  # pooler on each pair's [CLS]
        (3, 8, 2, 1),  # next-sentence classifier, per pair
        (2, 8, 8, 1),  # MLM dense at the row's masked positions
        (2, 8, 32, 1),
    ]
    assert step_flops("pretraining", TINY, inputs, 3) == hand_count(matmuls, 3)


def test_geglu_and_local_layers_count_what_they_compute():
    # Rows of 12; layer 0 global, layer 1 local with 2 keys each side: 5 keys a query.
    modern = dataclasses.replace(
        TINY, feed_forward="geglu", global_attention_every=2, local_attention_window=4
    )
    geglu = [(12, 8, 16, 1)]  # the gate, beside the intermediate and output matrices

    def layer(keys):
        return [(12, 8, 8, 2), (12, 8, 8, 2), (12, 4, keys, 2), (12, keys, 4, 2), *geglu]

    matmuls = layer(12) + layer(5) + 2 * [(12, 8, 16, 1), (12, 16, 8, 1)]
    inputs = dict.fromkeys(("input_ids", "input_mask", "segment_ids"), 12)
    assert step_flops("tagging", modern, inputs, 3, 5) == hand_count(matmuls + [(12, 8, 5, 1)], 3)


@pytest.mark.parametrize(
    ("kind", "num_labels", "pooled", "head"),
    [
        ("classification", 3, 1, [(1, 8, 8, 1), (1, 8, 3, 1)]),  # pooler, classifier
        ("classification", 3, 2, [(2, 8, 8, 1), (2, 8, 3, 1)]),  # two packed examples
        ("tagging", 5, 1, [(4, 8, 5, 1)]),  # a classifier per token, no pooler
        ("squad", 2, 1, [(4, 8, 2, 1)]),  # start and end logits per token
    ],
)
def test_fine_tuning_counts_are_the_hand_counts(kind, num_labels, pooled, head):
    inputs = dict.fromkeys(("input_ids", "input_mask", "segment_ids"), 4)
    if pooled > 1:
        inputs["cls_positions"] = pooled
    counted = step_flops(kind, TINY, inputs, 3, num_labels)
    assert counted == hand_count(encoder_matmuls(4) + head, 3)


def xla_flops(model, inputs, loss) -> float:
    """XLA's FLOPs of the compiled forward and backward pass (the gradient of `loss`)."""
    params = model.init(jax.random.key(0), *inputs, deterministic=True)["params"]

    def loss_fn(params):
        return loss(model.apply({"params": params}, *inputs, deterministic=True))

    cost = jax.jit(jax.grad(loss_fn)).lower(params).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return cost["flops"]


def squares(outputs) -> jax.Array:
    # Not a plain sum: its constant gradient lets XLA turn the backward matmuls of the
    # logits into reductions, which would count fewer FLOPs than the model's training does.
    return sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(outputs))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pretraining", "classification", "tagging", "squad"])
def test_count_against_xla_cost_analysis(kind):
    c = model_lib.BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=256,
        vocab_size=512,
        max_position_embeddings=32,
    )
    batch, length, predictions, labels = 2, 32, 5, 3
    ids = jnp.ones((batch, length), jnp.int32)
    inputs = (ids, ids, jnp.zeros_like(ids))
    models = {
        "pretraining": model_lib.BertForPreTraining(c),
        "classification": model_lib.BertForSequenceClassification(c, labels),
        "tagging": model_lib.BertForTokenClassification(c, labels),
        "squad": model_lib.BertForQuestionAnswering(c),
    }
    if kind == "pretraining":
        positions = jnp.tile(jnp.arange(predictions, dtype=jnp.int32), (batch, 1))
        inputs = (*inputs, positions)
    row = dict.fromkeys(("input_ids", "input_mask", "segment_ids"), length)
    if kind == "pretraining":
        row["masked_lm_positions"] = predictions
    counted = step_flops(kind, c, row, batch, num_labels=2 if kind == "squad" else labels)
    xla = xla_flops(models[kind], inputs, squares)
    # XLA counts a matmul as we do (2 m k n) and adds what is not one: LayerNorm, GELU,
    # softmax, bias and residual adds, some dozens of FLOPs per activation against the
    # matmuls' 2 x width per activation; at width 64 that is 5.6% more (2.5% at 128,
    # 1.3% at 256). A head counted wrong or a missing backward pass is off by far more.
    assert counted <= xla <= 1.08 * counted, xla / counted


# ------------------------------------------------------------------------------- peaks


@pytest.mark.parametrize(
    ("kind", "per_chip"),
    [("TPU v4", 275e12), ("TPU v5 lite", 197e12), ("TPU v5", 459e12), ("TPU v6 lite", 918e12)],
)
def test_tpu_peaks_are_bertjax_tpu_figures_per_device(kind, per_chip):
    for dtype in ("bfloat16", "float32"):  # TPUs multiply float32 in bf16 passes by default
        peak, source = flops.peak_flops(fake_devices(kind, 8, "tpu"), dtype)
        assert peak == 8 * per_chip
        assert kind in source and "Cloud TPU documentation" in source


@pytest.mark.parametrize(
    ("kind", "bf16", "tf32", "fp32"),
    [
        ("NVIDIA A100-SXM4-40GB", 312e12, 156e12, 19.5e12),
        ("NVIDIA A100 80GB PCIe", 312e12, 156e12, 19.5e12),
        ("NVIDIA H100 80GB HBM3", 989.5e12, 494.5e12, 67e12),
        ("NVIDIA H100 PCIe", 756.5e12, 378e12, 51e12),
    ],
)
def test_gpu_peaks_follow_the_dtype_and_matmul_precision(kind, bf16, tf32, fp32):
    assert flops.device_peak_flops(kind, "bfloat16")[0] == bf16
    # float32 matmuls run on TF32 tensor cores at JAX's default precision...
    peak, source = flops.device_peak_flops(kind, "float32")
    assert peak == tf32 and "TF32" in source and "datasheet" in source
    # ... and in float32 when asked for it.
    with jax.default_matmul_precision("highest"):
        assert flops.device_peak_flops(kind, "float32")[0] == fp32
    assert flops.peak_flops(fake_devices(kind, 4), "bfloat16")[0] == 4 * bf16


def test_an_unknown_device_kind_has_no_peak_and_says_so():
    assert flops.device_peak_flops("NVIDIA GeForce GTX 1080", "bfloat16") is None
    peak, why = flops.peak_flops(fake_devices("NVIDIA GeForce GTX 1080", 2), "bfloat16")
    assert peak is None
    assert "'NVIDIA GeForce GTX 1080'" in why and "MFU not reported" in why


# ------------------------------------------------------------------------ CPU probe


def test_cpu_peak_is_measured_once_per_host_and_cached(cache_home, monkeypatch):
    monkeypatch.setattr(flops, "load_per_core", lambda: 1.0)  # as busy throughout
    devices = jax.devices()
    assert len(devices) == 8  # conftest's fake devices, which share this host's cores
    peak, source = flops.peak_flops(devices, "float32")
    assert peak > 0 and "measured" in source and str(cache_home) in source
    # Once per host, not per fake device; the model's dtype does not change it.
    assert flops.peak_flops(devices[:1], "bfloat16")[0] == peak
    (entry,) = json.loads(cache_home.read_text()).values()
    assert entry["flops_per_second"] == peak

    def no_probe(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(flops, "probe_matmul_flops", no_probe)
    # In this process it is not read again; in a new one it is read from the cache.
    os.rename(cache_home, f"{cache_home}.away")
    assert flops.peak_flops(devices, "float32")[0] == peak
    os.rename(f"{cache_home}.away", cache_home)
    monkeypatch.setattr(flops, "_measured", {})
    assert flops.peak_flops(devices, "float32")[0] == peak


@pytest.mark.parametrize("corrupt", ["{not json", "[1, 2]", '{"x": 1', "\xff\xfe"])
def test_a_corrupt_cache_file_is_measured_again(cache_home, monkeypatch, corrupt):
    cache_home.parent.mkdir(parents=True)
    cache_home.write_text(corrupt, encoding="latin-1")
    monkeypatch.setattr(flops, "probe_matmul_flops", lambda device, dtype: 1.5e10)
    assert flops.peak_flops(jax.devices(), "float32")[0] == 1.5e10
    (entry,) = json.loads(cache_home.read_text()).values()
    assert entry["flops_per_second"] == 1.5e10


def test_entries_of_other_hosts_are_kept(cache_home, monkeypatch):
    cache_home.parent.mkdir(parents=True)
    other = {"Another CPU | 64 cores | jax 0.1 | float32": {"flops_per_second": 3e12}}
    cache_home.write_text(json.dumps(other))
    monkeypatch.setattr(flops, "probe_matmul_flops", lambda device, dtype: 2e10)
    assert flops.peak_flops(jax.devices()[:1], "float32")[0] == 2e10
    assert len(json.loads(cache_home.read_text())) == 2


def test_a_peak_measured_under_load_is_measured_again_when_quieter_and_the_higher_kept(
    cache_home, monkeypatch
):
    devices = jax.devices()[:1]
    probes = iter([4e10, 2e11, 1e11])
    monkeypatch.setattr(flops, "probe_matmul_flops", lambda device, dtype: next(probes))
    monkeypatch.setattr(flops, "load_per_core", lambda: 1.5)  # a test suite's load

    def peak():
        monkeypatch.setattr(flops, "_measured", {})  # a new process
        return flops.peak_flops(devices, "float32")[0]

    assert peak() == 4e10
    assert peak() == 4e10  # no quieter: not measured again
    monkeypatch.setattr(flops, "load_per_core", lambda: 0.1)
    assert peak() == 2e11  # quieter: measured again, higher
    (entry,) = json.loads(cache_home.read_text()).values()
    assert (entry["flops_per_second"], entry["load"]) == (2e11, 0.1)
    assert peak() == 2e11  # measured quiet: kept
    monkeypatch.setattr(flops, "load_per_core", lambda: 0.9)
    cache_home.write_text(json.dumps({next(iter(json.loads(cache_home.read_text()))): {
        "flops_per_second": 2e11, "load": 2.0}}))  # fmt: skip
    assert peak() == 2e11  # a lower probe (1e11) does not replace a higher figure
    (entry,) = json.loads(cache_home.read_text()).values()
    assert (entry["flops_per_second"], entry["load"]) == (2e11, 0.9)
    # A figure kept before loads were is measured again once, whatever the load now.
    probes = iter([3e11])
    monkeypatch.setattr(flops, "load_per_core", lambda: 3.0)
    cache_home.write_text(json.dumps({next(iter(json.loads(cache_home.read_text()))): {
        "flops_per_second": 8.6e10}}))  # fmt: skip
    assert peak() == 3e11


# ------------------------------------------------------------------- in a training run


@pytest.mark.integration
def test_training_logs_mfu(make_small_config, tmp_path, cache_home, capsys):
    config = make_small_config()
    config.num_train_steps = 4
    config.log_every_steps = 2
    config.eval_every_steps = 0
    workdir = tmp_path / "run"
    # One device: the loop's sharding is the sharding tests' concern.
    train.train_and_evaluate(config, str(workdir), devices=jax.devices()[:1])

    lines = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    train_lines = [r for r in lines if r["split"] == "train"]
    assert [r["step"] for r in train_lines] == [2, 4]
    per_step = step_flops(
        "pretraining",
        model_lib.from_config(config.model),
        pretraining_inputs(config.data.max_seq_length, config.data.max_predictions_per_seq),
        config.train_batch_size,
    )
    peak = flops.peak_flops(jax.devices()[:1], "float32")[0]
    for r in train_lines:
        assert 0 < r["mfu"] <= 1
        assert r["model_flops_per_second"] == pytest.approx(r["steps_per_second"] * per_step)
        assert r["mfu"] == pytest.approx(r["model_flops_per_second"] / peak)
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step")]
    assert len(shown) == 2
    assert all(re.search(r" tokens/s  mfu \d+\.\d%  eta ", line) for line in shown), shown


@pytest.mark.slow
@pytest.mark.parametrize("packed", [False, True], ids=["pairs", "packed_rows"])
def test_benchmark_reports_mfu_and_the_share_outside_the_matmuls(tmp_path, cache_home, packed):
    from bertjax.bench import throughput
    from experiments.pretrain import tiny_cpu

    config = tiny_cpu.get_config()
    config.train_batch_size = 8
    config.data.pack_examples = packed
    # The synthetic batch has the run's columns (packed: cls_positions, NSP per slot).
    # One of them also traced after the timed steps (--profile).
    profile = str(tmp_path / "profile") if packed else ""
    r = throughput.measure(config, str(tmp_path), steps=2, profile=profile)
    if profile:
        traces = [name for _, _, names in os.walk(profile) for name in names]
        assert [name for name in traces if name.endswith(".xplane.pb")], traces
    assert r["peak_flops"] == flops.peak_flops(jax.devices(), "float32")[0]
    assert "measured" in r["peak_source"]
    assert 0 < r["mfu"] <= 1
    assert r["mfu"] == pytest.approx(
        r["analytic_flops_per_step"] / r["step_time_s"] / r["peak_flops"]
    )
    # On CPU the matmul rate is the peak probe's; the rest of the step is outside the matmuls.
    assert r["matmul_flops_per_s"] == r["peak_flops"]
    assert r["outside_matmul_share"] == pytest.approx(1 - r["matmul_time_s"] / r["step_time_s"])
    assert r["outside_matmul_share"] < 1
    json.dumps(r)  # what --json prints
