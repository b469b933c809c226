"""Running a user-facing command as a user starts it, on the tests' small model: the
command tier's programs (tests/commands_test.py) and the small pretrained workdir that
conftest's `command_pretrained` makes with them."""

import os
import subprocess
import sys

from support import REPO, SMALL_VOCAB_SIZE

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}

# make_small_config (tests/conftest.py) as overrides of tiny_cpu.py.
SMALL_MODEL = {
    "train_batch_size": 8, "eval_batch_size": 8, "num_eval_steps": 2, "eval_every_steps": 4,
    "checkpoint_every_steps": 4, "log_every_steps": 2, "optimizer.warmup_steps": 2,
    "data.max_seq_length": 64, "data.max_predictions_per_seq": 10,
    "data.document_buffer_size": 32, "data.shuffle_buffer_size": 64,
    "data.vocab_size": SMALL_VOCAB_SIZE, "model.hidden_size": 64,
    "model.num_attention_heads": 2, "model.intermediate_size": 128,
    "model.max_position_embeddings": 64,
}  # fmt: skip


def flags(overrides: dict) -> list[str]:
    return [f"--config.{key}={value}" for key, value in overrides.items()]


def run(module: str, *args, cwd=REPO, expect: int = 0) -> subprocess.CompletedProcess:
    """`python -m module args...`, which must exit with `expect`."""
    result = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == expect, result.stderr[-3000:] + result.stdout[-3000:]
    return result
