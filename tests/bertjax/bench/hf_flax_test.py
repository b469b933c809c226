"""bertjax.bench.throughput's comparison with Hugging Face's Flax BERT, as far as the test venv goes.

The comparison itself needs transformers 4.x (`make bench-hf`); the test venv
pins transformers 5, which has no Flax models, so these tests check the timing
loop and that asking for the comparison there fails at once, in one line, and
says what to run.
"""

import os
import re
import subprocess
import sys

import pytest
from support import REPO

from bertjax.bench import hf_flax
from data_pipeline.errors import UserError

pytestmark = pytest.mark.integration

# What TensorFlow and XLA print from C++ while they load, whatever TF_CPP_MIN_LOG_LEVEL says.
_NATIVE_LOG = re.compile(r"^(WARNING: All log messages before absl::InitializeLog|[IWE]\d{4} )")


def _has_hf_flax_bert() -> bool:
    try:
        hf_flax.import_hf_flax_bert()
    except hf_flax.HFFlaxUnavailableError:
        return False
    return True


needs_no_hf_flax = pytest.mark.skipif(
    _has_hf_flax_bert(), reason="this transformers has Flax models"
)


def test_median_step_times_take_turns_and_thread_each_state():
    calls = []

    def make_step(name):
        def step(state, batch, rng):
            calls.append((name, state))
            return state + 1, {"loss": state}

        return step

    times = hf_flax.median_step_times(
        [(make_step("ours"), 0), (make_step("hf"), 10)], batch=None, rng=None, steps=3
    )
    assert calls == [
        (name, start + i) for i in range(4) for name, start in (("ours", 0), ("hf", 10))
    ]
    assert len(times) == 2 and all(t >= 0 for t in times)


@needs_no_hf_flax
def test_import_without_flax_says_to_run_make_bench_hf():
    with pytest.raises(UserError, match=r"transformers 4\.x.*make bench-hf") as raised:
        hf_flax.import_hf_flax_bert()
    assert isinstance(raised.value, hf_flax.HFFlaxUnavailableError)
    assert isinstance(raised.value.__cause__, ImportError)


@needs_no_hf_flax
def test_cli_compare_hf_flax_fails_before_compiling():
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": str(REPO),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertjax.bench.throughput",
            "--config",
            "experiments/pretrain/tiny_cpu.py",
            "--compare_hf_flax",
        ],
        capture_output=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    # One line, `error: ...`, exit status 2: a user error, not a traceback.
    lines = [line for line in result.stderr.decode().splitlines() if not _NATIVE_LOG.match(line)]
    assert len(lines) == 1 and lines[0].startswith("error: --compare_hf_flax needs"), lines
    assert "make bench-hf" in lines[0]
    assert result.returncode == 2
    assert "compile" not in result.stdout.decode()
