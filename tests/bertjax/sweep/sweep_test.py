"""bertjax.sweep: trials checked before any runs, the Optuna queue, and a real sweep killed and
resumed by two workers, with its report."""

import csv
import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import ml_collections
import pytest
from support import REPO

from bertjax.sweep import command, hyper, trial_queue, worker
from bertjax.sweep.definition import SweepDefinition
from experiments.pretrain import tiny_cpu

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
            'def get_sweep(h):\n    return h.sweep("optimizer.learning_rat", [1e-3])\n',
            "error: trial 0 (000-learning_rat=0.001): unknown config key: "
            "config.optimizer.learning_rat",
        ),
        ("X = 1\n", "defines no get_sweep(h) beside get_config()"),
    ],
)
def test_a_bad_sweep_fails_before_any_trial_runs(tmp_path, body, message):
    config = write_config(tmp_path, body)
    result = sweep_cli("run", "--config", str(config), "--sweep_dir", str(tmp_path / "sweep"))
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = error_lines(result.stderr)
    assert message in line
    assert not (tmp_path / "sweep").exists()


def tiny_config_40_steps():
    """tiny_cpu.py's config cut to 40 steps with 5 of warmup: a fresh copy."""
    config = tiny_cpu.get_config()
    config.num_train_steps = 40
    config.optimizer.warmup_steps = 5
    return config


@pytest.mark.parametrize(
    "trials, message",
    [
        ([{"optimizer.warmup": 3}], r"trial 0 \(000-warmup=3\): unknown config key: "),
        ([{"seed": 1}, {"optimizer.learning_rate": "fast"}], r"trial 1 \(.*learning_rate=fast"),
        ([{"optimizer.learning_rate": -1.0}], r"learning_rate=-1.0: must be above 0"),
        ([{"optimizer.warmup_steps": 100}], r"warmup_steps=100 is above num_train_steps=40"),
        ([{"seed.value": 1}], r"config.seed is a value, not a group"),
        ([{"model.num_hidden_layers": 2.5}], r"model.num_hidden_layers=2.5"),
        ([{"data.max_seq_length": 1024}], r"max_seq_length"),
    ],
)
def test_every_trial_is_checked_as_a_run_would(trials, message):
    with pytest.raises(command.SweepError, match=message):
        command.check_trials(tiny_config_40_steps(), hyper.as_sweep(trials, "test"))


def test_overrides_keep_the_configs_references():
    config = command.apply_overrides(tiny_config_40_steps(), {"data.vocab_size": 2048}, "trial 0")
    assert config.model.vocab_size == 2048  # model.vocab_size follows data.vocab_size
    assert tiny_config_40_steps().model.vocab_size == 4096


def test_values_on_the_command_line_parse_back_to_themselves():
    assert worker.override_args({"a": True, "b": 3e-05, "c": 2, "d": "gelu"}) == [
        "--config.a=true",
        "--config.b=3e-05",
        "--config.c=2",
        "--config.d=gelu",
    ]
    assert worker.trial_name(7, {"optimizer.learning_rate": 3e-5, "data.source": "a/b"}) == (
        "007-learning_rate=3e-05,source=a_b"
    )


def make_definition(sweep_dir, trials=({"seed": 0}, {"seed": 1}), **fields) -> SweepDefinition:
    values = dict(
        config="experiment.py",
        config_arg=None,
        overrides={},
        trials=tuple(trials),
        space={"seed": hyper.Choice((0, 1))},
        search="",
        num_trials=len(trials),
        metric="",
        mode="min",
        prune=False,
        max_retries=1,
        sweep_dir=str(sweep_dir),
        config_values={},
    )
    return SweepDefinition(**{**values, **fields})


def make_study(tmp_path, trials=({"seed": 0}, {"seed": 1}), max_retries=1):
    definition = make_definition(tmp_path, trials, max_retries=max_retries)
    storage = trial_queue.open_storage(trial_queue.storage_url(str(tmp_path), ""), heartbeat_s=30)
    study = trial_queue.open_study(storage, "sweep", direction="minimize", create=True)
    trial_queue.record_sweep(study, definition)
    for index, overrides in enumerate(trials):
        trial_queue.enqueue(study, index, overrides, attempt=1)
    return study, definition


def test_the_queue_gives_each_trial_once_and_retries_failures_up_to_the_limit(tmp_path):
    study, definition = make_study(tmp_path, max_retries=1)
    first, second = trial_queue.claim(study), trial_queue.claim(study)
    assert trial_queue.claim(study) is None
    assert {first.user_attrs["index"], second.user_attrs["index"]} == {0, 1}
    for trial in (first, second):
        worker.suggest(trial, trial.user_attrs["keys"], definition.space)
    study.tell(first, 1.5)
    study.tell(second, state=trial_queue.FAIL)
    assert trial_queue.requeue(
        study, trial_queue.frozen_trial(study, second), failed=True
    )  # attempt 2 of 2
    retry = trial_queue.claim(study)
    assert retry.user_attrs["attempt"] == 2 and retry.user_attrs["index"] == 1
    assert worker.suggest(retry, ["seed"], definition.space) == {"seed": 1}
    study.tell(retry, state=trial_queue.FAIL)
    assert not trial_queue.requeue(study, trial_queue.frozen_trial(study, retry), failed=True)
    statuses = [(r.index, r.status, len(r.attempts)) for r in trial_queue.records(study)]
    assert statuses == [(0, "done", 1), (1, "failed", 2)]


def test_a_trial_whose_worker_died_is_queued_again_to_resume(tmp_path):
    study, _ = make_study(tmp_path, trials=({"seed": 0},))
    trial = trial_queue.claim(study)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    trial.set_user_attr(
        "worker", {"host": os.uname().nodename, "pid": gone.pid, "started": time.time()}
    )
    trial_queue.fail_gone_workers(study)
    again = trial_queue.claim(study)
    assert again is not None and again.user_attrs["attempt"] == 1  # not counted as a failure
    old = trial_queue.frozen_trial(study, trial)
    assert old.state == trial_queue.FAIL and old.user_attrs["interrupted"]
    trial_queue.fail_gone_workers(study)  # this worker is alive: its trial stays
    assert trial_queue.frozen_trial(study, again).state == trial_queue.RUNNING


def test_a_trial_queued_twice_runs_once(tmp_path):
    # `run` can queue a trial again while another process, which has just failed its
    # gone worker's attempt, queues it too; each copy is taken, the second dropped.
    study, _ = make_study(tmp_path, trials=({"seed": 0}, {"seed": 1}))
    trial_queue.enqueue(study, 0, {"seed": 0}, attempt=1)
    trial_queue.enqueue(study, 1, {"seed": 1}, attempt=1)
    first = trial_queue.claim(study)
    assert first.user_attrs["index"] == 0
    second = trial_queue.claim(study)  # the copy of trial 0 is dropped on the way
    assert second.user_attrs["index"] == 1
    study.tell(second, 2.0)
    assert trial_queue.claim(study) is None  # trial 1's copy: trial 1 is done
    statuses = [(r.index, r.status, len(r.attempts)) for r in trial_queue.records(study)]
    assert statuses == [(0, "running", 1), (1, "done", 1)]
    dropped = [t for t in study.get_trials() if t.user_attrs.get("duplicate")]
    assert len(dropped) == 2 and {t.state for t in dropped} == {trial_queue.FAIL}


def test_another_sweep_in_the_same_directory_is_refused():
    recorded = make_definition("d", trials=({"seed": 0},), max_retries=2)
    command.check_same_sweep(recorded, dataclasses.replace(recorded, max_retries=5), "d")
    with pytest.raises(command.SweepError, match=r"d: holds another sweep: its trials was"):
        command.check_same_sweep(
            recorded, dataclasses.replace(recorded, trials=({"seed": 1},)), "d"
        )


def test_a_definition_goes_through_json_and_back_unchanged(tmp_path):
    definition = make_definition(
        tmp_path,
        config_arg="mrpc",
        overrides={"num_train_epochs": 2.0},
        space={
            "seed": hyper.Choice((0, 1)),
            "optimizer.learning_rate": hyper.Range(1e-5, 1e-3, True),
        },
        search="tpe",
        num_trials=4,
        config_values={"seed": 0, "optimizer": {"learning_rate": 3e-5}},
    )
    stored = json.loads(json.dumps(definition.to_json()))  # as the study keeps it
    assert stored["space"]["seed"] == {"choice": [0, 1]}
    assert SweepDefinition.from_json(stored) == definition
    study, recorded = make_study(tmp_path)
    assert trial_queue.recorded_sweep(study) == recorded
    assert (
        trial_queue.load(trial_queue.storage_url(str(tmp_path), ""), "sweep", heartbeat_s=30)[1]
        == recorded
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: {**d, "colour": "blue"}, "sweep definition: unknown field 'colour'"),
        (lambda d: {k: v for k, v in d.items() if k != "mode"}, "missing field 'mode'"),
        (lambda d: {**d, "space": {"seed": {"values": [0]}}}, r"space: seed: .* is neither"),
    ],
)
def test_a_definition_with_a_field_unknown_or_missing_is_refused(tmp_path, change, message):
    stored = change(make_definition(tmp_path).to_json())
    with pytest.raises(hyper.SweepError, match=message):
        SweepDefinition.from_json(stored)
    # A study another tool made: the one-line error names the sweep and the field.
    study, _ = make_study(tmp_path)
    study.set_user_attr(trial_queue.SWEEP_ATTR, stored)
    with pytest.raises(trial_queue.QueueError, match=f"^sweep 'sweep': .*{message}"):
        trial_queue.load(trial_queue.storage_url(str(tmp_path), ""), "sweep", heartbeat_s=30)


def test_devices_are_split_between_trials():
    assert worker.cpu_shares([0, 1, 2, 3], 2) == [{"cpus": {0, 1}}, {"cpus": {2, 3}}]
    assert worker.cpu_shares([0, 1], 3) == [{"cpus": {0}}, {"cpus": {1}}, {"cpus": {0}}]
    assert worker.gpu_shares(4, 2)[1] == {"env": {"CUDA_VISIBLE_DEVICES": "2,3"}}
    second = worker.tpu_shares(8, 4)[1]["env"]
    assert second["TPU_VISIBLE_CHIPS"] == "2,3"
    assert second["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,2,1"
    with pytest.raises(trial_queue.QueueError, match="do not split evenly"):
        worker.gpu_shares(3, 2)


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
        def get_sweep(h):
            return h.zip(
                h.sweep("data.short_seq_prob", [0.1, 0.5, 0.0]), h.sweep("seed", [0, 1, 0])
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
    assert "holds another sweep: its overrides was {}" in line


def test_the_experiment_configs_sweeps_are_valid():
    from experiments.finetune import classify, glue

    for module, arg in ((tiny_cpu, None), (glue, "mrpc"), (classify, None)):
        config = module.get_config(*([arg] if arg else []))
        with config.unlocked():
            if "init_checkpoint" in config and not config.init_checkpoint:
                config.init_checkpoint = "unused"
        assert isinstance(config, ml_collections.ConfigDict)
        s = command.load_sweep(module.__file__, arg)
        assert len(s) >= 2
        for overrides in s:
            command.apply_overrides(config, overrides, "test")


def test_two_workers_share_a_sweep_in_a_postgresql_server(tmp_path):
    from support import postgres_server

    with postgres_server.start() as (url, why):
        if url is None:
            pytest.skip(f"no PostgreSQL server here: {why}")
        config = write_config(tmp_path, 'def get_sweep(h):\n    return h.sweep("seed", [0, 1])\n')
        args = ["--storage", url, "--study_name", "two"]
        short = ["--config.num_train_steps=5", "--config.eval_every_steps=5"]
        sweep_dir = tmp_path / "sweep"
        with open(tmp_path / "run.log", "w") as run_log:
            run = subprocess.Popen(
                [sys.executable, "-m", "bertjax.sweep", "run", "--config", str(config)]
                + ["--sweep_dir", str(sweep_dir), *args, *short],
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


def test_a_search_draws_its_trials_from_the_space(tmp_path):
    study, definition = make_study(tmp_path, trials=())
    definition = dataclasses.replace(
        definition,
        search="random",
        num_trials=3,
        space={"optimizer.learning_rate": hyper.Range(1e-5, 1e-3, True)},
    )
    study.sampler = command.make_sampler("random")
    searcher = worker.Worker(study, definition, parallel=1, heartbeat_s=30)
    drawn = []
    while (trial := searcher._new_search_trial()) is not None:
        params = worker.suggest(trial, trial.user_attrs["keys"], definition.space)
        drawn.append(params["optimizer.learning_rate"])
        study.tell(trial, 1.0)
    assert len(drawn) == 3 and len(set(drawn)) == 3
    assert all(1e-5 <= lr <= 1e-3 for lr in drawn)


def test_pruning_stops_a_trial_that_trails_the_median(tmp_path):
    _, definition = make_study(tmp_path, trials=({"seed": 0}, {"seed": 1}, {"seed": 2}))
    definition = dataclasses.replace(definition, prune=True, metric="accuracy", mode="max")
    study = trial_queue.open_study(
        trial_queue.open_storage(trial_queue.storage_url(str(tmp_path), ""), heartbeat_s=30),
        "pruned",
        direction="maximize",
        create=True,
        pruner=command.make_pruner(True),
    )
    trial_queue.record_sweep(study, definition)
    for index in range(3):
        trial_queue.enqueue(study, index, {"seed": index}, attempt=1)
    for accuracy in (0.8, 0.9, 0.5):  # the third trails the others at every step
        trial = trial_queue.claim(study)
        workdir = tmp_path / f"trial{trial.number}"
        workdir.mkdir()
        lines = [{"step": s, "split": "eval", "accuracy": accuracy} for s in (10, 20)]
        (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        assert worker.report_evals(trial, definition, str(workdir), 0) == 2
        if trial.should_prune():
            study.tell(trial, state=trial_queue.PRUNED)
        else:
            study.tell(trial, accuracy)
    statuses = [r.status for r in trial_queue.records(study)]
    assert statuses == ["done", "done", "pruned"]
