"""A real multi-host run: two local processes of 2 CPU devices each train one run together.

Each process reads its own share of the documents, so the run's data differs
from a one-process run's and the losses cannot be compared with one; what is
checked is that the processes agree with each other, that process 0 alone
writes the workdir, and that the checkpoint they write together restores. With a
collective hook and a hook that asks one process alone to stop, both stop at one step,
its checkpoint saved.
"""

import json
import os
import pickle
import re
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from faults_test import command
from support import REPO, run_hooks
from support.multihost_worker import fingerprint

from bertjax import checkpoint, train

pytestmark = pytest.mark.integration

WORKER = os.path.join(REPO, "tests", "support", "multihost_worker.py")
# Both processes together; a hang (a collective one process never joins) fails here.
TIMEOUT_S = 300
TIMING_KEYS = (
    "steps_per_second",
    "tokens_per_second",
    "model_flops_per_second",
    "mfu",
    "input_wait_seconds",
    "input_wait_fraction",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(tmp_path, config, *mode: str) -> list[dict]:
    config_path = tmp_path / "config.pkl"
    config_path.write_bytes(pickle.dumps(config))
    env = dict(
        os.environ,
        # Not conftest's one device for child programs: 2 per process, 4 in the run
        # (fast compiles kept).
        XLA_FLAGS="--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0",
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{free_port()}",
        JAX_NUM_PROCESSES="2",
    )
    procs, logs = [], []
    for index in range(2):
        log = open(tmp_path / f"log{index}.txt", "w")  # noqa: SIM115
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    WORKER,
                    *mode,
                    str(config_path),
                    str(tmp_path / "workdir"),
                    str(tmp_path / f"out{index}.json"),
                ],
                env={**env, "JAX_PROCESS_ID": str(index)},
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for proc in procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
    for index, proc in enumerate(procs):
        if proc.returncode != 0:
            tail = (tmp_path / f"log{index}.txt").read_text()[-3000:]
            pytest.fail(f"process {index} exited with {proc.returncode}:\n{tail}")
    return [json.loads((tmp_path / f"out{index}.json").read_text()) for index in range(2)]


def without_timing(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def test_two_processes_train_evaluate_checkpoint_and_resume(tmp_path, make_small_config):
    config = make_small_config()
    first, second = run_two_processes(tmp_path, config)
    workdir = str(tmp_path / "workdir")

    assert first["process_count"] == second["process_count"] == 2
    assert first["device_count"] == second["device_count"] == 4
    # Logged values are global: both processes computed exactly the same.
    assert without_timing(first["metrics"]) == without_timing(second["metrics"])
    assert first["last_eval"] == second["last_eval"]
    # Process 0 alone wrote metrics.jsonl: each point once, its values.
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        written = [json.loads(line) for line in f]
    assert [(m["step"], m["split"]) for m in written] == [
        (2, "train"),
        (4, "train"),
        (4, "eval"),
        (6, "train"),
        (8, "train"),
        (8, "eval"),
    ]
    assert without_timing(written) == without_timing(first["metrics"])
    losses = [m["loss"] for m in written if m["split"] == "train"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    for name in ("config.json", "model_config.json", "vocab.txt"):
        assert os.path.exists(os.path.join(workdir, name))

    # Identical parameters on every device of both processes; the resume
    # restored exactly what was saved at step 4 and went on to step 8.
    assert first["saved"] == second["saved"]
    assert sorted(first["saved"]) == ["4", "8"]
    assert first["restored"] == second["restored"] == {"4": first["saved"]["4"]}
    assert first["saved"]["8"] != first["saved"]["4"]

    # Written by both processes together, the checkpoint restores whole here.
    assert checkpoint.latest_step(workdir) == 8
    run = train.build_run(config, workdir)
    manager = checkpoint.make_manager(workdir, max_to_keep=5)
    state, _ = checkpoint.restore(manager, 8, run.abstract_state)
    manager.close()
    assert int(state.step) == 8
    assert fingerprint(state.params) == first["saved"]["8"]
    assert len(jax.devices()) == 8  # restored onto another mesh than it was saved from

    # Refused on both processes alike instead of hanging in a collective.
    assert first["refused"] == second["refused"]
    assert "config.num_eval_steps=10000: host 0's share" in first["refused"]["eval_share"]
    assert "hosts 0 and 1 would hold the same batch rows" in (first["refused"]["mesh_across_hosts"])


def test_two_processes_stop_together_when_a_hook_of_one_asks(tmp_path, make_small_config):
    # A collective hook from config.hooks, and the caller's hook that asks the run to stop
    # on process 1 alone (tests/support/run_hooks.py); a hang fails in run_two_processes.
    config = make_small_config()  # 8 steps
    first, second = run_two_processes(tmp_path, config, "hooks")
    workdir = str(tmp_path / "workdir")

    # JAX's preemption sync point: both saved and stopped at one step, after the ask.
    stops = [
        re.match(r"(.+) at step (\d+): checkpoint \2 saved", p["stopped"] or "")
        for p in (first, second)
    ]
    assert all(stops), (first["stopped"], second["stopped"])
    assert stops[1][1] == "ask_to_stop on process 1"  # the other heard of it from the runtime
    stop_step = int(stops[0][2])
    assert int(stops[1][2]) == stop_step
    assert run_hooks.STOP_ASKED_AT < stop_step < config.num_train_steps
    assert first["latest_after_stop"] == stop_step  # the step stopped at is saved
    # The collective hook ran at the same steps on both, until the stop check stopped both.
    before = [[step, step] for step in range(1, stop_step)]
    assert first["gathered_before_resume"] == second["gathered_before_resume"] == before
    # The resume (the stopping hook left out) went on to the end, with its last save.
    after = [[step, step] for step in range(stop_step + 1, config.num_train_steps + 1)]
    assert first["gathered"] == second["gathered"] == before + after
    assert checkpoint.latest_step(workdir) == config.num_train_steps
    assert first["resumed"] == second["resumed"]


def start_pair(tmp_path, argv: list[str], name: str) -> list[subprocess.Popen]:
    """`python -m bertjax.main --distributed ARGV` as processes 0 and 1 of one run."""
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0",
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{free_port()}",
        JAX_NUM_PROCESSES="2",
    )
    return [
        subprocess.Popen(
            [*argv[:3], "--distributed", *argv[3:]],
            # Each process keeps its own compilation cache from one launch to the next.
            env={
                **env,
                "JAX_PROCESS_ID": str(index),
                "JAX_COMPILATION_CACHE_DIR": str(tmp_path / f"jax_cache{index}"),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            },
            cwd=REPO,
            stdout=open(tmp_path / f"{name}{index}.out", "w"),  # noqa: SIM115
            stderr=open(tmp_path / f"{name}{index}.err", "w"),  # noqa: SIM115
        )
        for index in range(2)
    ]


def wait_pair(tmp_path, procs, name: str) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of both; a hang fails here."""
    deadline = time.monotonic() + TIMEOUT_S
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            pytest.fail(f"{name}: hung; {(tmp_path / f'{name}0.err').read_text()[-3000:]}")
    return [
        (
            proc.returncode,
            (tmp_path / f"{name}{index}.out").read_text(),
            (tmp_path / f"{name}{index}.err").read_text(),
        )
        for index, proc in enumerate(procs)
    ]


def test_two_processes_from_the_command_line_to_the_end(tmp_path, small_vocab_file):
    workdir = str(tmp_path / "pretrained")
    pretrain = command(workdir, small_vocab_file, "--config.log_every_steps=5")
    # Pretraining with its end-of-run report (which restores the checkpoint on every process).
    first = start_pair(
        tmp_path,
        [
            *pretrain,
            "--config.num_train_steps=10",
            "--config.eval_every_steps=10",
            "--fill_mask_examples=1",
        ],
        "a",
    )
    (code0, out0, err0), (code1, out1, err1) = wait_pair(tmp_path, first, "a")
    assert code0 == code1 == 0, err0[-3000:] + err1[-3000:]
    assert "held-out MLM accuracy" in out0 and "fill-mask" in out0
    assert "held-out" not in out1  # only process 0 prints

    # SIGTERM to one process of a pair: elastic_test.py, which resumes on another count.
    # Fine-tuning on two processes, from the pretrained checkpoint.
    rows = [f"{'big red river ' * (i % 3 + 1)}\t{i % 2}" for i in range(40)]
    (tmp_path / "train.tsv").write_text("text_a\tlabel\n" + "\n".join(rows) + "\n")
    finetune = [
        sys.executable,
        "-m",
        "bertjax.main",
        "--config",
        os.path.join(REPO, "experiments/finetune/classify.py"),
        f"--workdir={tmp_path / 'classifier'}",
        f"--config.init_checkpoint={workdir}",
        f"--config.data.train_file={tmp_path / 'train.tsv'}",
        f"--config.data.eval_file={tmp_path / 'train.tsv'}",
        "--config.data.text_a=text_a",
        "--config.data.max_seq_length=16",
        "--config.train_batch_size=8",
        "--config.eval_batch_size=8",
        "--config.num_train_epochs=1.0",
        "--config.log_every_steps=1",
    ]
    results = wait_pair(tmp_path, start_pair(tmp_path, finetune, "c"), "c")
    assert [code for code, _, _ in results] == [0, 0], results[0][2][-3000:]
    scores = json.loads((tmp_path / "classifier" / "results.json").read_text())
    assert scores["eval"]["step"] == 5 and "accuracy" in scores["eval"]
