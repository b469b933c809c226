"""Resuming on another number of hosts, on `python -m bertjax.main` in subprocesses: a
run of two processes stopped with SIGTERM goes on in one, is stopped again and goes on
in two, with the losses of an uninterrupted run step for step: the same global batches
(data_pipeline/streams.py), no replay."""

import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest
from faults_test import PREEMPTED, command
from multihost_test import TIMEOUT_S, start_pair, wait_pair
from support import REPO

pytestmark = pytest.mark.integration

STEPS = 40
RUN = (
    f"--config.num_train_steps={STEPS}",
    "--config.checkpoint_every_steps=1000",  # only the checkpoint the stop makes
    "--config.model.hidden_dropout_prob=0.0",
    "--config.model.attention_probs_dropout_prob=0.0",
)


def start_one(tmp_path, argv: list[str], name: str) -> list[subprocess.Popen]:
    """`python -m bertjax.main ARGV` as one process of 2 devices (a pair has 2 each)."""
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0",
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache_one"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    return [
        subprocess.Popen(
            argv,
            env=env,
            cwd=REPO,
            stdout=open(tmp_path / f"{name}0.out", "w"),  # noqa: SIM115
            stderr=open(tmp_path / f"{name}0.err", "w"),  # noqa: SIM115
        )
    ]


def start(tmp_path, hosts: int, argv: list[str], name: str) -> list[subprocess.Popen]:
    return (start_pair if hosts == 2 else start_one)(tmp_path, argv, name)


def logged(workdir) -> int:
    """The lines of metrics.jsonl written whole so far (one a step here), while a run writes."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(line.endswith("\n") for line in f)


def losses(workdir) -> dict[int, float]:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    return {line["step"]: line["loss"] for line in lines if line["split"] == "train"}


def test_a_run_resumes_on_another_number_of_hosts_with_the_same_batches(tmp_path, small_vocab_file):
    # One run stopped twice: two hosts, then one, then two again. Its losses after each
    # resume are those of a run of two hosts that was never stopped (each host reads its
    # share of the documents: the batches are those of the host count a run starts with).
    straight, stopped = str(tmp_path / "straight"), str(tmp_path / "stopped")
    results = wait_pair(
        tmp_path, start(tmp_path, 2, [*command(straight, small_vocab_file), *RUN], "a"), "a"
    )
    assert all(code == 0 for code, _, _ in results), results[0][2][-3000:]
    expected = losses(straight)
    assert sorted(expected) == list(range(1, STEPS + 1))

    stops = []
    for hosts, name in ((2, "b"), (1, "c")):
        # Stopped once 10 more steps are logged (SIGTERM to the last process: every
        # process saves the same step).
        processes = start(tmp_path, hosts, [*command(stopped, small_vocab_file), *RUN], name)
        deadline = time.monotonic() + TIMEOUT_S
        while logged(stopped) < (stops[-1] if stops else 0) + 10:
            assert time.monotonic() < deadline and processes[0].poll() is None
            time.sleep(0.2)
        processes[-1].send_signal(signal.SIGTERM)
        results = wait_pair(tmp_path, processes, name)
        assert [code for code, _, _ in results] == [PREEMPTED] * hosts, results[0][2][-3000:]
        # SIGTERM to one process makes every process save the same step.
        said = [re.findall(r"^stopped: .+? at step (\d+):", err, re.M) for _, _, err in results]
        assert all(len(s) == 1 and s == said[0] for s in said), said
        stops.append(int(said[0][0]))
        # No segment replays input: a resume starts where the input stood.
        assert "replaying" not in results[0][2]
    assert stops[0] < stops[1] < STEPS

    results = wait_pair(
        tmp_path, start(tmp_path, 2, [*command(stopped, small_vocab_file), *RUN], "d"), "d"
    )
    assert all(code == 0 for code, _, _ in results), results[0][2][-3000:]
    assert "replaying" not in results[0][2]
    resumed = losses(stopped)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    # Other batches would give losses a tenth apart; the same ones differ by the order
    # of a sum over 2 or 4 devices.
    after = range(stops[0] + 1, STEPS + 1)
    np.testing.assert_allclose([resumed[s] for s in after], [expected[s] for s in after], rtol=2e-4)
