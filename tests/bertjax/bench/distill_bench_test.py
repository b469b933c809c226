"""bertjax.bench.distill: the distillation step with its teacher, given its outputs and
without one, and the student's embedding throughput against its teacher's."""

import json
import re
import subprocess
import sys
import types

import pytest
from support import REPO

from bertjax.bench import distill
from data_pipeline.errors import UserError


@pytest.mark.command
def test_a_short_run_prints_the_three_steps_and_both_models_throughput(
    command_pretrained, tmp_path
):
    # The command tier's small model (2 layers) teaches its layer 1 (MiniLM's import and
    # compile cost a minute more).
    from bertjax.convert import shrink

    teacher = command_pretrained["workdir"]
    shrink.shrink(teacher, str(tmp_path / "student"), "1")
    result = subprocess.run(
        [sys.executable, "-m", "bertjax.bench.distill", f"--teacher={teacher}",
         f"--student={tmp_path / 'student'}", "--batch_size=4", "--query_length=16",
         "--passage_length=32", "--warmup=1", "--steps=1", "--texts=8", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("student 1 layers, teacher 2; 4 pairs of 16 + 32 tokens")
    ways = re.findall(r"^  train step, (.+?) +([\d.]+) ms +([\d.]+)x$", result.stdout, re.M)
    assert [way for way, *_ in ways] == list(distill.WAYS), result.stdout
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["embed"]["student"]["layers"] == 1 and report["texts"] == 8
    assert all(report["embed"][m]["texts_per_s"] > 0 for m in ("student", "teacher"))
    assert all(seconds > 0 for seconds in report["step_s"].values())


def flags_of(**values):
    defaults = dict(teacher=None, student=None, batch_size=32, query_length=32,
                    passage_length=128, warmup=3, steps=10, texts=1024)  # fmt: skip
    return types.SimpleNamespace(**{**defaults, **values})


@pytest.mark.parametrize(
    "values,message",
    [
        ({"batch_size": 1}, "--batch_size=1: in-batch negatives need at least 2"),
        ({"warmup": 0}, "--warmup=0: at least 1"),
        ({"texts": 0}, "--texts=0: at least 1"),
        ({"teacher": "/nonexistent"}, "--teacher=/nonexistent: no model_config.json there"),
    ],
)
def test_bad_input_is_one_line(values, message):
    with pytest.raises(UserError, match=re.escape(message)):
        distill.check_args(flags_of(**values))
