"""bertjax.sweep.worker: what a trial runs as, on which share of the devices, and how its end
is recorded, tested without starting a trial's process."""

import dataclasses
import functools
import io
import json
import math
import os
import signal
import sqlite3
import sys
import time

import ml_collections
import optuna
import pytest
from absl import flags
from ml_collections import config_flags
from support.sweeps import make_definition, make_study

from bertjax import workdir as workdir_lib
from bertjax.sweep import command, hyper, trial_queue, worker
from data_pipeline.errors import Preempted, UserError


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


def test_devices_are_split_between_trials():
    assert worker.cpu_shares([0, 1, 2, 3], 2) == [{"cpus": {0, 1}}, {"cpus": {2, 3}}]
    assert worker.cpu_shares([0, 1], 3) == [{"cpus": {0}}, {"cpus": {1}}, {"cpus": {0}}]
    assert worker.gpu_shares(4, 2)[1] == {"env": {"CUDA_VISIBLE_DEVICES": "2,3"}}
    second = worker.tpu_shares(8, 4)[1]["env"]
    assert second["TPU_VISIBLE_CHIPS"] == "2,3"
    assert second["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,2,1"
    with pytest.raises(trial_queue.QueueError, match="do not split evenly"):
        worker.gpu_shares(3, 2)


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


def test_a_trial_is_named_by_its_index_and_the_last_part_of_each_key():
    assert worker.trial_name(3, {}) == "003"
    assert worker.trial_name(1234, {"model.hidden_act": "gelu new", "do_lower_case": False}) == (
        "1234-hidden_act=gelu_new,do_lower_case=false"
    )
    long = worker.trial_name(5, {"data.input_files": "x" * 300})
    assert long == "005-input_files=" + "x" * (120 - len("input_files="))


def test_every_value_the_command_line_gets_is_the_value_the_config_flag_parses():
    config = ml_collections.ConfigDict(
        {"flag": False, "rate": 0.1, "big": 1.0, "steps": 1, "act": "relu", "nested": {"lr": 1.0}}
    )
    values = {
        "flag": True,
        "rate": 3e-05,
        "big": 1e16,
        "steps": 20000,
        "act": "gelu new",
        "nested.lr": 1e-10,
    }
    argv = ["main", *worker.override_args(values)]
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_dict("config", config, flag_values=flag_values, sys_argv=argv)
    flag_values(argv)
    for key, value in values.items():
        parsed = functools.reduce(getattr, key.split("."), flag_values.config)
        assert parsed == value and type(parsed) is type(value), key


@pytest.mark.integration
def test_a_trial_runs_main_with_the_sweeps_overrides_then_its_own(tmp_path):
    definition = make_definition(
        tmp_path, config="glue.py", config_arg="mrpc", overrides={"seed": 3, "a.b": 2.0}
    )
    assert worker.trial_command(definition, "/w/000-seed=1", {"seed": 1}) == [
        sys.executable,
        "-m",
        "bertjax.main",
        "--config",
        "glue.py:mrpc",
        "--workdir",
        "/w/000-seed=1",
        "--config.seed=3",
        "--config.a.b=2.0",
        "--config.seed=1",  # the last one is the one main sees
    ]
    glue = make_definition(tmp_path, config="glue.py", program="bertjax.suites.glue.trial")
    assert worker.trial_command(glue, "/w/000", {})[1:3] == ["-m", "bertjax.suites.glue.trial"]


def test_each_trial_gets_its_own_cores_gpus_or_tpu_chips():
    shares = worker.cpu_shares([0, 1, 2, 3, 4], 2)  # the fifth core is left over
    assert shares == [{"cpus": {0, 1}}, {"cpus": {2, 3}}]
    assert worker.gpu_shares(2, 1) == [{"env": {"CUDA_VISIBLE_DEVICES": "0,1"}}]
    assert worker.tpu_shares(4, 1) == [{"env": {}}]  # one process: the whole TPU VM
    halves = [share["env"] for share in worker.tpu_shares(8, 2)]
    assert [e["TPU_VISIBLE_CHIPS"] for e in halves] == ["0,1,2,3", "4,5,6,7"]
    assert {e["TPU_CHIPS_PER_PROCESS_BOUNDS"] for e in halves} == {"2,2,1"}
    assert [e["TPU_PROCESS_ADDRESSES"] for e in halves] == ["localhost:8476", "localhost:8477"]
    assert {s["env"]["TPU_CHIPS_PER_PROCESS_BOUNDS"] for s in worker.tpu_shares(8, 8)} == {"1,1,1"}
    with pytest.raises(trial_queue.QueueError, match="3 chips per trial is not a TPU share"):
        worker.tpu_shares(6, 2)
    with pytest.raises(trial_queue.QueueError, match="8 TPU chips do not split evenly"):
        worker.tpu_shares(8, 3)


def test_the_metric_is_the_sweeps_own_else_the_one_the_runs_best_follows(tmp_path):
    results = {"best_metric": {"name": "loss"}}
    assert worker.metric_name(make_definition(tmp_path, metric="accuracy"), results) == "accuracy"
    assert worker.metric_name(make_definition(tmp_path), results) == "loss"
    assert worker.metric_name(make_definition(tmp_path), {}) == ""


def test_a_failure_is_told_by_the_last_error_line_of_the_trials_log(tmp_path):
    log = tmp_path / "000.log"
    log.write_text("error: first\nTraceback (most recent call last):\nerror: second\n  error: x\n")
    assert worker.last_error(str(log), 2) == "second"
    log.write_text("error: long ago\n" + "step\n" * 200)  # only the last 200 lines count
    assert worker.last_error(str(log), 1) == f"exit status 1; see {log}"
    assert worker.last_error(str(log), -signal.SIGKILL) == "killed by SIGKILL"
    missing = str(tmp_path / "missing.log")
    assert worker.last_error(missing, 3) == f"exit status 3; see {missing}"


def test_a_trial_takes_the_values_it_was_given_for_its_keys():
    space = {"seed": hyper.Choice((0, 1)), "optimizer.learning_rate": hyper.Range(1e-5, 1e-3, True)}
    trial = optuna.trial.FixedTrial({"seed": 1, "optimizer.learning_rate": 3e-4})
    assert worker.suggest(trial, ["optimizer.learning_rate", "seed"], space) == {
        "optimizer.learning_rate": 3e-4,
        "seed": 1,
    }
    assert worker.suggest(trial, ["seed"], space) == {"seed": 1}


def test_pruning_hears_each_new_finite_evaluation_of_the_metric_once(tmp_path):
    study = optuna.create_study()
    trial = study.ask()
    definition = make_definition(tmp_path)  # no --metric: the run's own, from results.json
    (tmp_path / "results.json").write_text(json.dumps({"best_metric": {"name": "loss"}}))
    lines = [
        {"step": 5, "split": "train", "loss": 9.0},
        {"step": 10, "split": "eval", "loss": 3.0},
        {"step": 20, "split": "eval", "loss": math.nan},
    ]
    with open(tmp_path / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in lines)
    assert worker.report_evals(trial, definition, str(tmp_path), 0) == 2
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 30, "split": "eval", "loss": 2.0}) + "\n")
        f.write('{"step": 40, "split": "ev')  # the line a live run is writing
    assert worker.report_evals(trial, definition, str(tmp_path), 2) == 3
    assert study.trials[0].intermediate_values == {10: 3.0, 30: 2.0}


def test_the_logs_of_a_sweep_in_a_bucket_stay_on_this_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert worker.log_dir(str(tmp_path / "trials")) == str(tmp_path / "trials")
    local = worker.log_dir("gs://bucket/sweep/trials")
    assert local == str(tmp_path / "bertjax-sweep-logs" / "gs_bucket_sweep_trials")
    assert os.path.isdir(local)


@pytest.mark.parametrize(
    "status, pruned, results, max_retries, recorded, said",
    [
        (0, False, {"eval": {"loss": 2.5}}, 1, ("done", 1), "done in 0.5 min, loss 2.5000"),
        (0, False, {}, 1, ("failed", 1), "ended without a finite eval loss"),
        (1, True, {}, 1, ("pruned", 1), "pruned after 0.5 min"),
        (Preempted.EXIT_CODE, False, {}, 0, ("queued", 2), "stopped after 0.5 min; queued"),
        (-signal.SIGTERM, False, {}, 0, ("queued", 2), "stopped after 0.5 min; queued"),
        (UserError.EXIT_CODE, False, {}, 1, ("failed", 1), "failed: bad option (not retried)"),
        (1, False, {}, 1, ("queued", 2), "failed: bad option (queued again)"),
        (1, False, {}, 0, ("failed", 1), "failed: bad option (no attempts left)"),
    ],
    ids=["done", "no-metric", "pruned", "preempted", "sigterm", "user-error", "retried", "spent"],
)
def test_a_trials_exit_decides_whether_it_is_done_resumed_retried_or_given_up(
    tmp_path, status, pruned, results, max_retries, recorded, said
):
    study, definition = make_study(tmp_path, trials=({"seed": 0},), max_retries=max_retries)
    out = io.StringIO()
    trial_worker = worker.Worker(study, definition, parallel=1, heartbeat_s=30, out=out)
    trial = trial_queue.claim(study)
    worker.suggest(trial, ["seed"], definition.space)
    workdir = tmp_path / "trials" / "000-seed=0"
    workdir.mkdir(parents=True)
    results = {**results, "best_metric": {"name": "loss"}}
    (workdir / "results.json").write_text(json.dumps(results))
    log = tmp_path / "trials" / "000-seed=0.log"
    log.write_text("error: bad option\n")
    trial_worker._record(trial, "000-seed=0", status, pruned, str(workdir), str(log), 0.5)
    (record,) = trial_queue.records(study)
    assert (record.status, len(record.attempts)) == recorded
    (line,) = out.getvalue().splitlines()
    assert line.startswith(f"trial 000-seed=0: {said}"), line
    first = record.attempts[0]
    assert first.user_attrs["best_metric"] == {"name": "loss"}  # results kept on the attempt
    if record.status == "queued":  # the same attempt after a stop, the next after a failure
        interrupted = status != 1
        assert record.last.user_attrs["attempt"] == (1 if interrupted else 2)
        assert bool(first.user_attrs.get("interrupted")) == interrupted


def test_a_worker_keeps_its_trial_while_it_waits_to_start_the_run(tmp_path, monkeypatch):
    # Between taking a trial and watching its run a worker may wait for minutes: for the run
    # of a killed worker to save, for JAX to import on a loaded host. Its heartbeats go on,
    # so no other worker, looking for gone ones meanwhile, runs the trial a second time.
    study, definition = make_study(tmp_path, trials=({"seed": 0},))
    seen = []

    def wait_until_free(run_dir, timeout_s):
        if not seen:  # the first wait, as if it had lasted an hour
            with sqlite3.connect(tmp_path / "sweep.db") as db:
                db.execute("UPDATE trial_heartbeats SET heartbeat = datetime('now', '-1 hour')")
            time.sleep(3.0)
            trial_queue.fail_gone_workers(study)  # as every other worker does as it polls
            seen.append([r.status for r in trial_queue.records(study)])
        return True

    monkeypatch.setattr(workdir_lib, "wait_until_free", wait_until_free)
    monkeypatch.setattr(worker.Worker, "_watch", lambda self, *args: (0, False))
    out = io.StringIO()
    worker.Worker(study, definition, parallel=1, heartbeat_s=1, out=out)._slot({})
    assert seen == [["running"]]
    (record,) = trial_queue.records(study)
    assert len(record.attempts) == 1
    assert out.getvalue().count(": started (attempt 1)") == 1, out.getvalue()


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_worker_tells_which_trial_starts_and_how_far_the_sweep_is(tmp_path, monkeypatch):
    study, definition = make_study(tmp_path)
    clock, out = FakeClock(), io.StringIO()

    def watch(self, trial, command, workdir, share, log_file):
        # Each trial's run takes a minute; 30 s into the second, the sweep's line is due.
        if workdir.endswith("001-seed=1"):
            clock.now += 30
            assert self.progress.due()
            self._report_progress()
            clock.now += 30
        else:
            clock.now += 60
        os.makedirs(workdir)
        results = {"eval": {"loss": 2.5}, "best_metric": {"name": "loss"}}
        with open(os.path.join(workdir, "results.json"), "w") as f:
            json.dump(results, f)
        return 0, False

    monkeypatch.setattr(worker.Worker, "_watch", watch)
    worker.Worker(study, definition, parallel=1, heartbeat_s=30, out=out, clock=clock)._slot({})
    assert out.getvalue().splitlines() == [
        "trial 000-seed=0: started (attempt 1), 1 of 2",
        "trial 000-seed=0: done in 1.0 min, loss 2.5000",
        # The first trial took a minute, so the second is likely to.
        "trial 001-seed=1: started (attempt 1), 2 of 2; 1/2 trials done (50%), 1:00 so far, "
        "about 1:00 left",
        f"sweep {tmp_path}: 1/2 trials done (50%), 1:30 so far, about 1:30 left; "
        "running 001-seed=1 (0:30)",
        "trial 001-seed=1: done in 1.0 min, loss 2.5000",
    ]
