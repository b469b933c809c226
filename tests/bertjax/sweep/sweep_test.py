"""bertjax.sweep end to end, as `python -m bertjax.sweep` processes: a bad sweep refused before
any trial runs, a real sweep killed and resumed by two workers, with its report, a worker silent
past the grace period whose trial still runs once, and two workers sharing a PostgreSQL server.
Each module's rules are tested beside this file, without a run."""

import csv
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from support import REPO

from bertjax import workdir as workdir_lib
from bertjax.sweep import trial_queue

pytestmark = pytest.mark.integration

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def sweep_cli(*args, timeout=600, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "bertjax.sweep", *args],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def write_config(directory: pathlib.Path, sweep_body: str, name="experiment.py") -> pathlib.Path:
    path = directory / name
    path.write_text(
        textwrap.dedent(
            """\
            from experiments.pretrain import tiny_cpu


            def get_config():
                config = tiny_cpu.get_config()
                config.num_train_steps = 20
                config.optimizer.warmup_steps = 5
                config.eval_every_steps = 20
                config.num_eval_steps = 1
                config.checkpoint_every_steps = 5
                config.log_every_steps = 5
                config.train_batch_size = 8
                config.eval_batch_size = 8
                config.data.max_seq_length = 64
                config.data.max_predictions_per_seq = 10
                config.data.document_buffer_size = 32
                config.data.shuffle_buffer_size = 64
                config.model.hidden_size = 64
                config.model.num_attention_heads = 2
                config.model.intermediate_size = 128
                return config

            """
        )
        + textwrap.dedent(sweep_body)
    )
    return path


@pytest.mark.parametrize(
    "body, message",
    [
        (
            'def get_hyper(hyper):\n    return hyper.sweep("config.optimizer.learning_rat", [1e-3])\n',
            "error: trial 0 (000-learning_rat=0.001): unknown config key: "
            "config.optimizer.learning_rat",
        ),
        ("X = 1\n", "defines no get_hyper(hyper) beside get_config()"),
        (
            'def get_sweep(h):\n    return h.sweep("seed", [0])\n',
            "get_sweep(h) is now get_hyper(hyper), as in big_vision: rename it",
        ),
    ],
)
def test_a_bad_sweep_fails_before_any_trial_runs(tmp_path, body, message):
    config = write_config(tmp_path, body)
    result = sweep_cli("run", "--config", str(config), "--sweep_dir", str(tmp_path / "sweep"))
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = error_lines(result.stderr)
    assert message in line
    assert not (tmp_path / "sweep").exists()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_sweep_killed_and_resumed_by_two_workers_finishes_each_trial_once(tmp_path):
    config = write_config(
        tmp_path,
        """\
        def get_hyper(hyper):
            return hyper.zipit(
                [
                    hyper.sweep("config.data.short_seq_prob", [0.1, 0.5, 0.0]),
                    hyper.sweep("config.seed", [0, 1, 0]),
                ]
            )
        """,
    )
    # Neither key is in the compiled steps (the seed is an argument), so the trials share
    # them through the run's compilation cache (conftest.py): the third compiles nothing.
    sweep_dir = tmp_path / "sweep"
    args = ["run", "--config", str(config), "--sweep_dir", str(sweep_dir)]
    trials_dir = sweep_dir / "trials"
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(
            [sys.executable, "-m", "bertjax.sweep", *args, "--parallel", "2"],
            cwd=REPO,
            env=ENV,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    saved = []  # trials with a checkpoint when the first worker is killed

    def a_trial_done_and_another_checkpointed():
        done = (tmp_path / "first.log").read_text().count(": done in")
        unfinished = [
            d
            for d in trials_dir.glob("*")
            if d.is_dir() and not (d / "results.json").exists() and (d / "checkpoints").exists()
        ]
        saved[:] = [d.name for d in unfinished if any((d / "checkpoints").glob("[0-9]*"))]
        return done >= 1 and saved

    try:
        wait_for(a_trial_done_and_another_checkpointed, 400, "a trial done, another saved")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()

    # The rest: `run` again and a worker on the same queue, side by side.
    storage = f"sqlite:///{sweep_dir / 'sweep.db'}"
    with open(tmp_path / "worker.log", "w") as log:
        second_worker = subprocess.Popen(
            [sys.executable, "-m", "bertjax.sweep", "worker", "--storage", storage],
            cwd=REPO,
            env=ENV,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    resumed = sweep_cli(*args)
    assert second_worker.wait(timeout=600) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    assert resumed.returncode == 0, resumed.stderr[-3000:] + resumed.stdout[-3000:]
    # The killed ones were queued again by whichever process looked first; `run` may
    # queue one a second time while the worker is doing so (each copy then runs once).
    assert re.search(r"3 trial\(s\), [0-2] queued now", resumed.stdout), resumed.stdout[-3000:]

    storage_ = trial_queue.open_storage(storage, heartbeat_s=30)
    study = trial_queue.open_study(storage_, "sweep", direction="minimize", create=False)
    records = trial_queue.records(study)
    assert [r.status for r in records] == ["done"] * 3
    for r in records:
        assert [t.state for t in r.attempts].count(trial_queue.COMPLETE) == 1
    interrupted = [r for r in records if any(t.user_attrs.get("interrupted") for t in r.attempts)]
    assert interrupted, "the kill interrupted no trial"
    for name in saved:
        # Resumed from its checkpoint: the second run logged no step before the first save.
        log = (trials_dir / (name + ".log")).read_text()
        runs = log.split("\n$ ")
        assert len(runs) >= 3, log[-2000:]
        assert "step      5/20" not in runs[-1]
    both = (tmp_path / "worker.log").read_text() + resumed.stdout
    assert both.count(": done in") == 3 - (tmp_path / "first.log").read_text().count(": done in")

    report = sweep_cli("report", str(sweep_dir))
    assert report.returncode == 0, report.stderr[-3000:]
    finals = {}
    for workdir in trials_dir.iterdir():
        if workdir.is_dir():
            finals[workdir] = json.loads((workdir / "results.json").read_text())["eval"]["loss"]
    best = min(finals, key=finals.get)
    (best_line,) = [line for line in report.stdout.splitlines() if line.startswith("best: ")]
    assert best_line.endswith(str(best)) and f"loss {finals[best]:.4f}" in best_line
    written = sweep_dir / "report"
    with open(written / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["status"] for row in rows] == ["done"] * 3
    # Each trial's share of its wall time that trained, from its event log (bertjax.goodput).
    assert all(0 < float(row["goodput"]) < 1 for row in rows), rows
    assert {round(float(row["final"]), 6) for row in rows} == {round(v, 6) for v in finals.values()}
    for name in ("metric_vs_data_short_seq_prob.png", "metric_vs_seed.png", "curves.png"):
        assert (written / name).read_bytes()[:4] == b"\x89PNG"

    # The same command again: everything is done, nothing runs.
    again = sweep_cli(*args)
    assert again.returncode == 0 and "0 queued now" in again.stdout
    assert "started" not in again.stdout
    # A different sweep in this directory is refused, before anything runs.
    other = sweep_cli(*args, "--config.seed=3")
    assert other.returncode == 2
    (line,) = error_lines(other.stderr)
    assert "holds another sweep: its overrides.seed was (none), now 3;" in line


def test_a_worker_silent_past_the_grace_period_does_not_run_its_trial_twice(tmp_path):
    # A loaded host or a long compile can starve a worker of its heartbeats while its trial
    # runs on; here the worker and the run are stopped for longer than the grace period
    # (4 heartbeats of 1 s) while `run` is started again. The run holds its workdir: the
    # trial is left to it, and runs once.
    config = write_config(
        tmp_path, 'def get_hyper(hyper):\n    return hyper.sweep("config.seed", [0])\n'
    )
    sweep_dir = tmp_path / "sweep"
    args = ["run", "--config", str(config), "--sweep_dir", str(sweep_dir), "--heartbeat_s", "1"]
    processes, stopped = {}, []
    try:
        with open(tmp_path / "first.log", "w") as log:
            processes["first"] = subprocess.Popen(
                [sys.executable, "-m", "bertjax.sweep", *args],
                cwd=REPO,
                env=ENV,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        lock = f"trials/*/{workdir_lib.LOCK_FILE}"
        wait_for(lambda: list(sweep_dir.glob(lock)), 300, "the trial's run to hold its workdir")
        worker = psutil.Process(processes["first"].pid)
        (run,) = [p for p in worker.children() if "bertjax.main" in p.cmdline()]
        for process in (worker, run):
            process.suspend()
            stopped.append(process)
        time.sleep(6)  # the last heartbeat now older than the grace period
        with open(tmp_path / "again.log", "w") as log:
            processes["again"] = subprocess.Popen(
                [sys.executable, "-m", "bertjax.sweep", *args],
                cwd=REPO,
                env=ENV,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        # `run` again looks for gone workers before it says what it queued.
        again_log = tmp_path / "again.log"
        wait_for(lambda: "queued now" in again_log.read_text(), 300, "the queue looked at")
        storage = trial_queue.open_storage(f"sqlite:///{sweep_dir / 'sweep.db'}", heartbeat_s=1)
        study = trial_queue.open_study(storage, "sweep", direction="minimize", create=False)
        (record,) = trial_queue.records(study)
        assert [t.state for t in record.attempts] == [trial_queue.RUNNING], again_log.read_text()
        for process in stopped:
            process.resume()
        stopped.clear()
        for name, process in processes.items():
            status = process.wait(timeout=600)
            assert status == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    finally:
        for process in stopped:
            process.resume()
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    logs = (tmp_path / "first.log").read_text() + (tmp_path / "again.log").read_text()
    assert logs.count(": started (attempt 1)") == 1 and "given up" not in logs, logs[-3000:]
    (record,) = trial_queue.records(study)
    assert record.status == "done" and len(record.attempts) == 1
    (trial_log,) = (sweep_dir / "trials").glob("*.log")
    assert trial_log.read_text().count("\n$ ") == 1  # one run of the trial


def test_two_workers_share_a_sweep_in_a_postgresql_server(tmp_path):
    from support import postgres_server

    with postgres_server.start() as (url, why):
        if url is None:
            pytest.skip(f"no PostgreSQL server here: {why}")
        # The run takes the first trial, long enough that the worker, which starts after
        # it, finds the second still queued (under load it once found both done).
        steps = (
            'hyper.sweep("config.num_train_steps", [300, 5]), '
            'hyper.sweep("config.eval_every_steps", [300, 5])'
        )
        sweep = (
            "def get_hyper(hyper):\n"
            f'    return hyper.zipit([hyper.sweep("config.seed", [0, 1]), {steps}])\n'
        )
        config = write_config(tmp_path, sweep)
        args = ["--storage", url, "--study_name", "two"]
        sweep_dir = tmp_path / "sweep"
        with open(tmp_path / "run.log", "w") as run_log:
            run = subprocess.Popen(
                [sys.executable, "-m", "bertjax.sweep", "run", "--config", str(config)]
                + ["--sweep_dir", str(sweep_dir), *args],
                cwd=REPO,
                env=ENV,
                stdout=run_log,
                stderr=subprocess.STDOUT,
            )
        wait_for(lambda: "queued now" in (tmp_path / "run.log").read_text(), 300, "the queue")
        with open(tmp_path / "worker.log", "w") as worker_log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "bertjax.sweep", "worker", *args],
                cwd=REPO,
                env=ENV,
                stdout=worker_log,
                stderr=subprocess.STDOUT,
            )
        for name, process in (("run", run), ("worker", worker)):
            status = process.wait(timeout=600)
            assert status == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
        for name in ("run", "worker"):  # each worker ran one of the two
            assert ": done in" in (tmp_path / f"{name}.log").read_text()
        storage = trial_queue.open_storage(url, heartbeat_s=30)
        study = trial_queue.open_study(storage, "two", direction="minimize", create=False)
        assert [r.status for r in trial_queue.records(study)] == ["done", "done"]
        assert all(len(r.attempts) == 1 for r in trial_queue.records(study))
        assert sweep_cli("report", str(sweep_dir), *args).returncode == 0
