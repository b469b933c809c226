"""bertjax.sweep.trial_queue: the queue of a sweep's trials in a SQLite study, taken, retried,
resumed and recorded as its workers leave them, without running a trial."""

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import psutil
import pytest
from support.sweeps import make_study

from bertjax import workdir as workdir_lib
from bertjax.sweep import trial_queue, worker


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


@pytest.mark.integration
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


def test_the_queue_is_a_file_in_the_sweep_directory_unless_a_database_is_named(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert trial_queue.storage_url("sweep", "") == f"sqlite:///{tmp_path}/sweep/sweep.db"
    url = "postgresql://ann@db.example/sweeps"
    assert trial_queue.storage_url("gs://bucket/sweep", url) == url
    with pytest.raises(
        trial_queue.QueueError, match=r"^--sweep_dir=gs://bucket/sweep: .*--storage"
    ):
        trial_queue.storage_url("gs://bucket/sweep", "")


def test_a_database_that_cannot_be_opened_is_one_line_without_its_password():
    # No server listens on port 1: whether or not its driver is installed, this fails.
    url = "postgresql://ann:secret@127.0.0.1:1/sweeps"
    with pytest.raises(trial_queue.QueueError) as raised:
        trial_queue.open_storage(url, heartbeat_s=30)
    message = str(raised.value)
    assert message.startswith("--storage=postgresql://ann:***@127.0.0.1:1/sweeps: ")
    assert "secret" not in message and "\n" not in message


def test_a_sweep_not_started_by_run_is_refused_by_name(tmp_path):
    make_study(tmp_path)
    url = trial_queue.storage_url(str(tmp_path), "")
    storage = trial_queue.open_storage(url, heartbeat_s=30)
    with pytest.raises(
        trial_queue.QueueError, match=r"holds no sweep named 'other' \(it holds sweep\)"
    ):
        trial_queue.open_study(storage, "other", direction="minimize", create=False)
    trial_queue.open_study(storage, "bare", direction="minimize", create=True)
    with pytest.raises(trial_queue.QueueError, match=r"^sweep 'bare' in sqlite:.*never started"):
        trial_queue.load(url, "bare", heartbeat_s=30)


def test_the_queue_gives_the_lowest_index_first_to_this_worker(tmp_path):
    # A trial queued again after an interruption goes on before the trials after it start.
    study, _ = make_study(tmp_path, trials=())
    for index in (2, 0, 1):
        trial_queue.enqueue(study, index, {"seed": index}, attempt=1)
    trial = trial_queue.claim(study)
    assert trial.user_attrs["index"] == 0
    me = psutil.Process()
    assert trial.user_attrs["worker"] == {
        "host": socket.gethostname(),
        "pid": me.pid,
        "started": me.create_time(),
    }
    assert trial_queue.frozen_trial(study, trial).state == trial_queue.RUNNING
    assert [trial_queue.claim(study).user_attrs["index"] for _ in range(2)] == [1, 2]
    assert trial_queue.claim(study) is None


@pytest.mark.parametrize("max_retries", [0, 2])
def test_a_failing_trial_gets_one_attempt_and_then_max_retries_more(tmp_path, max_retries):
    study, _ = make_study(tmp_path, trials=({"seed": 0},), max_retries=max_retries)
    attempts = []
    while (trial := trial_queue.claim(study)) is not None:
        attempts.append(trial.user_attrs["attempt"])
        study.tell(trial, state=trial_queue.FAIL)
        trial_queue.requeue(study, trial_queue.frozen_trial(study, trial), failed=True)
    assert attempts == list(range(1, max_retries + 2))
    (record,) = trial_queue.records(study)
    assert record.status == "failed" and record.params == {"seed": 0}


def test_an_interrupted_trial_is_queued_again_as_the_same_attempt(tmp_path):
    study, definition = make_study(tmp_path, trials=({"seed": 1},), max_retries=0)
    trial = trial_queue.claim(study)
    worker.suggest(trial, ["seed"], definition.space)
    trial_queue.end_interrupted(study, trial, "stopped (exit status 75)")
    old = trial_queue.frozen_trial(study, trial)
    assert old.state == trial_queue.FAIL
    assert old.user_attrs["error"] == "stopped (exit status 75)" and old.user_attrs["interrupted"]
    again = trial_queue.claim(study)  # with no retries left: an interruption is no failure
    assert again.user_attrs["attempt"] == 1
    assert worker.suggest(again, again.user_attrs["keys"], definition.space) == {"seed": 1}


@pytest.mark.integration
def test_a_worker_on_another_host_is_not_judged_by_this_hosts_processes(tmp_path):
    study, _ = make_study(tmp_path, trials=({"seed": 0},))
    trial = trial_queue.claim(study)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    worker_there = {"host": socket.gethostname() + "-other", "pid": gone.pid, "started": 0.0}
    trial.set_user_attr("worker", worker_there)
    trial_queue.fail_gone_workers(study)
    assert trial_queue.frozen_trial(study, trial).state == trial_queue.RUNNING
    assert trial_queue.claim(study) is None


def test_a_worker_whose_process_id_now_names_another_process_is_gone(tmp_path):
    study, _ = make_study(tmp_path, trials=({"seed": 0},))
    trial = trial_queue.claim(study)
    me = psutil.Process()
    # This process's id, but a worker started an hour before it: the id was reused.
    trial.set_user_attr(
        "worker", {"host": socket.gethostname(), "pid": me.pid, "started": me.create_time() - 3600}
    )
    trial_queue.fail_gone_workers(study)
    old = trial_queue.frozen_trial(study, trial)
    assert old.state == trial_queue.FAIL and old.user_attrs["interrupted"]
    assert old.user_attrs["error"] == f"its worker (process {me.pid}) ended"
    assert trial_queue.claim(study).user_attrs["attempt"] == 1


def silence(sweep_dir) -> None:
    """Every attempt's last heartbeat an hour ago, past the grace period of 4 heartbeats of 30 s."""
    with sqlite3.connect(sweep_dir / "sweep.db") as db:
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime('now', '-1 hour')")


def test_a_trial_whose_heartbeats_stopped_is_queued_again_to_resume(tmp_path):
    study, _ = make_study(tmp_path, trials=({"seed": 0},), max_retries=0)
    trial = trial_queue.claim(study)  # its worker, this process, is alive: only heartbeats tell
    silence(tmp_path)
    trial_queue.fail_gone_workers(study)
    old = trial_queue.frozen_trial(study, trial)
    assert old.state == trial_queue.FAIL
    again = trial_queue.claim(study)
    assert again is not None and again.user_attrs["attempt"] == 1
    assert old.user_attrs.get("interrupted")
    assert old.user_attrs["error"] == "its worker's heartbeats stopped"


def test_a_silent_trial_whose_run_holds_its_workdir_is_left_to_it(tmp_path):
    # A worker too starved or stopped to record heartbeats (a loaded host, a long compile)
    # while its run goes on: the run's lock on the workdir says the trial is alive.
    study, _ = make_study(tmp_path, trials=({"seed": 0},))
    trial = trial_queue.claim(study)
    run_dir = tmp_path / "trials" / "000-seed=0"
    trial.set_user_attr("workdir", str(run_dir))
    with workdir_lib.claim(str(run_dir)):  # as the trial's run holds it
        silence(tmp_path)
        trial_queue.fail_gone_workers(study)
        assert trial_queue.frozen_trial(study, trial).state == trial_queue.RUNNING
        assert trial_queue.claim(study) is None
    # The run ended (killed with its worker, on this machine or another): heartbeats tell.
    trial_queue.fail_gone_workers(study)
    old = trial_queue.frozen_trial(study, trial)
    assert old.state == trial_queue.FAIL and old.user_attrs["interrupted"]
    assert old.user_attrs["error"] == "its worker's heartbeats stopped"
    assert trial_queue.claim(study).user_attrs["attempt"] == 1


def test_heartbeats_go_on_while_the_block_runs_and_end_with_it(tmp_path):
    study, _ = make_study(tmp_path, trials=({"seed": 0},))
    trial = trial_queue.claim(study)
    with trial_queue.heartbeats(study, trial, interval_s=0.2):
        silence(tmp_path)
        time.sleep(1.0)  # the worker busy with anything but its heartbeats
        trial_queue.fail_gone_workers(study)
        assert trial_queue.frozen_trial(study, trial).state == trial_queue.RUNNING
    silence(tmp_path)  # the block over, its thread ended: silent again
    trial_queue.fail_gone_workers(study)
    assert trial_queue.frozen_trial(study, trial).state == trial_queue.FAIL


def test_a_queued_copy_of_a_pruned_trial_is_dropped(tmp_path):
    study, _ = make_study(tmp_path, trials=({"seed": 0},))
    study.tell(trial_queue.claim(study), state=trial_queue.PRUNED)
    trial_queue.enqueue(study, 0, {"seed": 0}, attempt=1)
    assert trial_queue.claim(study) is None
    assert [(r.index, r.status) for r in trial_queue.records(study)] == [(0, "pruned")]


def test_records_give_each_trial_its_status_overrides_and_time(tmp_path):
    study, definition = make_study(tmp_path, trials=[{"seed": i} for i in range(5)])
    done, pruned, running, failed = (trial_queue.claim(study) for _ in range(4))
    worker.suggest(done, ["seed"], definition.space)
    study.tell(done, 0.5)
    study.tell(pruned, state=trial_queue.PRUNED)
    study.tell(failed, state=trial_queue.FAIL)
    trial_queue.requeue(study, trial_queue.frozen_trial(study, failed), failed=True)
    study.tell(trial_queue.claim(study), state=trial_queue.FAIL)  # trial 3's second attempt
    records = trial_queue.records(study)
    assert [(r.index, r.status, len(r.attempts)) for r in records] == [
        (0, "done", 1),
        (1, "pruned", 1),
        (2, "running", 1),
        (3, "failed", 2),
        (4, "queued", 1),
    ]
    # A trial's overrides: its parameters once suggested, its queued values before.
    assert [r.params for r in records] == [{"seed": i} for i in range(5)]
    assert records[3].last.user_attrs["attempt"] == 2
    spent = sum(
        (t.datetime_complete - t.datetime_start).total_seconds() for t in records[3].attempts
    )
    assert records[3].seconds == pytest.approx(spent) and spent > 0
    assert records[4].seconds == 0.0  # queued: never started


@pytest.mark.parametrize("round_", range(8))
def test_a_trial_claimed_at_once_by_many_workers_goes_to_one(tmp_path, round_):
    # Workers with their own storage (other processes) and slots sharing one (threads of
    # a worker). A claim that reads the state and then writes it let several read
    # WAITING on SQLite: a trial ran twice in most rounds.
    del round_
    study, _ = make_study(tmp_path, trials=({"seed": 0},))
    url = trial_queue.storage_url(str(tmp_path), "")
    others = [
        trial_queue.open_study(
            trial_queue.open_storage(url, heartbeat_s=30), "sweep", direction="minimize",
            create=False,
        )
        for _ in range(4)
    ]  # fmt: skip
    claimers = [*others, study, study]
    start = threading.Barrier(len(claimers))
    won = []

    def claim(claimer):
        start.wait()
        trial = trial_queue.claim(claimer)
        if trial is not None:
            won.append(trial.number)

    threads = [threading.Thread(target=claim, args=(c,)) for c in claimers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1, won
    (record,) = trial_queue.records(study)
    assert record.status == "running" and len(record.attempts) == 1
