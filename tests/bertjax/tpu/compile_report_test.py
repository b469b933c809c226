"""bertjax.tpu.compile_report: the real train and eval steps compiled by the TPU compiler (libtpu) on this CPU."""

import json
import os
import subprocess
import sys

import pytest
from support import REPO

from bertjax.tpu import compile_report, slices
from data_pipeline.errors import UserError
from experiments.pretrain import tiny_cpu

pytestmark = pytest.mark.tpu_compile

TINY = "experiments/pretrain/tiny_cpu.py"


def run_aot(*args, timeout=300):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "bertjax.tpu.aot", "--config", TINY, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def our_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_tiny_config_on_a_v5e_slice():
    r = compile_report.compile_report(tiny_cpu.get_config(), slices.parse("v5e-8"))
    assert (r["accelerator_type"], r["chips"], r["hosts"]) == ("v5litepod-8", 8, 1)
    assert r["mesh"] == {"data": 8, "fsdp": 1, "tensor": 1}
    assert r["fits"] and r["eval_fits"]
    # The state (parameters and two Adam moments, float32, replicated) is an argument on
    # every chip: 3 x 4 bytes x the 1.0M parameters of BERT-Tiny with a 4,096 vocabulary.
    assert 11e6 < r["hbm_argument_bytes"] < 14e6
    assert r["hbm_peak_bytes"] > r["hbm_argument_bytes"]
    # The compiler's FLOPs are the analytic matmul count plus what is not a matmul.
    assert 0.9 < r["xla_flops_per_step"] / r["analytic_flops_per_step"] < 1.3
    assert r["xla_flops_per_step"] == pytest.approx(8 * r["xla_flops_per_chip"])
    assert r["roofline_step_s"] > 0 and 0 < r["roofline_mfu"] < 1
    assert r["roofline_tokens_per_s"] == pytest.approx(32 * 128 / r["roofline_step_s"])
    # 4 sequences per chip fit, so the estimate of the most that fit is at least that.
    assert r["largest_batch_estimate"] >= 4


def test_multislice_report():
    config = tiny_cpu.get_config()
    report = compile_report.compile_report(
        config, slices.parse("v6e-8", num_slices=2), with_eval=False
    )
    lines = compile_report.format_report(report).splitlines()
    assert lines[0].startswith("v6e-8 x 2 slices: 16 chips, 2 host(s), mesh {'data': 16")
    assert any(line.startswith("HBM per chip   peak") for line in lines)
    assert lines[-1] == "fits"


def test_a_step_that_does_not_fit_names_the_keys_to_change():
    # 65,536 sequences of 128 per v5e chip: far more than its 16 GiB.
    result = run_aot(
        "--topology", "v5e-8", "--noeval", "--json", "--config.train_batch_size=524288"
    )
    assert result.returncode == 1, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["fits"]
    assert "RESOURCE_EXHAUSTED: Ran out of memory" in report["compiler_error"]
    (error,) = our_lines(result.stderr)
    assert "does not fit in the HBM of a v5e chip" in error
    # What is compiling shows as it starts (then every 30 s how long it has taken), on
    # stderr: stdout is the JSON alone.
    assert "compiling the train step, batch 524288 on 8 chips ...\n" in result.stderr
    assert "compiling the eval step" not in result.stderr
    assert "config.train_batch_size" in error and "config.optimizer.num_microbatches" in error


def test_an_unknown_slice_is_one_line():
    result = run_aot("--topology", "v3-8")
    assert result.returncode == 2, result.stderr[-3000:]
    (error,) = our_lines(result.stderr)
    assert error.startswith("error: --topology=v3-8: not a TPU slice")


@pytest.mark.parametrize(
    "overrides, topology, message",
    [
        ({"platform": "cpu"}, "v5p-8", "config.platform='cpu', but this run found 4 tpu device"),
        ({"train_batch_size": 6}, "v5p-8", "is not divisible by the data-parallel size 4"),
        ({"train_batch_size": 1}, "v5p-16", "not divisible by the 2 hosts of v5p-16"),
    ],
)
def test_configs_that_cannot_run_there_fail_before_compiling(overrides, topology, message):
    config = tiny_cpu.get_config()
    config.update(overrides)
    with pytest.raises(UserError, match=message):
        compile_report.compile_report(config, slices.parse(topology))


@pytest.mark.parametrize("limit", [0, 1, 3, 4, 5, 7, 8, 9, 31, 32, 100, 1000])
@pytest.mark.parametrize("start", [1, 4, 16])
def test_largest_fitting_finds_the_limit(limit, start):
    probed = []

    def fits(batch):
        probed.append(batch)
        return batch <= limit

    found = compile_report.largest_fitting(fits, step=1, start=start, start_fits=start <= limit)
    assert found == limit
    assert len(probed) <= 2 * max(limit, start).bit_length() + 2


def test_largest_fitting_keeps_to_multiples_of_the_microbatches():
    found = compile_report.largest_fitting(lambda b: b <= 22, step=4, start=8, start_fits=True)
    assert found == 20


def test_splash_attention_compiles_for_a_tpu_slice(tmp_path):
    # The mesh's TPU devices make attention.py build the Mosaic kernel here, not the
    # interpreted one it runs on this CPU; in shard_map over batch (data) and heads (tensor).
    import jax
    from flax import linen as nn

    from bertjax import sharding, train

    config = tiny_cpu.get_config()
    config.model.attention_implementation = "splash"
    config.model.attention_probs_dropout_prob = 0.0  # the kernel has no attention dropout
    config.mesh.tensor = 2
    assert config.data.max_seq_length % 128 == 0
    tpu_slice = slices.parse("v5e-8")
    config, task = compile_report.prepare(config, str(tmp_path))
    run = compile_report.build(config, task, tpu_slice, tpu_slice.compile_devices(), str(tmp_path))
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
        train_step, _ = train.jit_steps(run)
        rng = jax.eval_shape(lambda: jax.random.key(0))
        rng = jax.ShapeDtypeStruct(rng.shape, rng.dtype, sharding=sharding.replicated(run.mesh))
        batch = compile_report.abstract_batch(run, "train", config.train_batch_size)
        hlo = train_step.lower(run.abstract_state, batch, rng).as_text()
    # The forward, dq and dkv kernels (the layers share their lowered functions).
    assert hlo.count("tpu_custom_call") >= 3 and "interpret" not in hlo
    r = compile_report.compile_report(config, tpu_slice)
    assert r["mesh"] == {"data": 4, "fsdp": 1, "tensor": 2}
    assert r["fits"] and r["eval_fits"]


def test_an_embedder_compiles_before_its_pretraining_exists_and_without_its_pairs():
    # retrieval_pod.py as written but its batches, on BERT-Tiny: the init checkpoint is
    # the pretraining config that will write it, the pairs gs:// files that do not exist.
    # (GradCache's memory: train_test.py.) 256 pairs a step (4 a chip
    # per microbatch): the TPU compiler takes about 40 s for it here, 107 s for 1,024.
    from experiments.finetune import retrieval_pod

    config = retrieval_pod.get_config("bert_base")
    config.init_checkpoint = os.path.join(REPO, TINY)
    config.train_batch_size, config.eval_batch_size = 256, 64
    r = compile_report.compile_report(config, slices.parse("v5e-8"))
    assert r["fits"] and r["eval_fits"] and r["num_microbatches"] == 8
    assert r["seq_len"] == 64 + 256  # a row's query and its passage
    assert r["counts_cover_one_loop"] and r["roofline_step_s"] > 0
    # Every forward pass runs twice: at most 3/4 of the step's FLOPs are the model's.
    assert r["roofline_mfu"] <= 0.75 + 1e-9


def test_a_student_compiles_with_its_teacher_in_the_step():
    # The teacher named by its pretraining config (a placeholder of that run): a one-layer
    # BERT-Tiny learning from tiny_cpu's two layers, on a v5e-8.
    config = tiny_cpu.get_config()
    config.model.num_hidden_layers = 1
    config.distill = tiny_cpu.ml_collections.ConfigDict(
        {"teacher": TINY, "temperature": 2.0, "weight": 1.0, "mlm_weight": 1.0}
    )
    r = compile_report.compile_report(config, slices.parse("v5e-8"), with_eval=False)
    assert r["fits"]
    # The analytic count has the teacher's forward pass, and so has the compiled step.
    assert 0.9 < r["xla_flops_per_step"] / r["analytic_flops_per_step"] < 1.3
