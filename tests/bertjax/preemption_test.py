"""bertjax.preemption with real signals sent to this process.

Every test runs under `recorded`: SIGTERM and SIGINT go to a handler that only records
them, before and after the code under test, so no signal can end pytest.
"""

import os
import shutil
import signal
import threading
import time

import pytest
from faults_test import start

from bertjax import preemption
from data_pipeline import cli


@pytest.fixture
def recorded():
    """The signals that reached the test's own handler, which is in place around the test."""
    seen = []

    def record(number, frame):
        del frame
        seen.append(signal.Signals(number).name)

    previous = {number: signal.signal(number, record) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield seen, record
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def send(number, until, timeout_s=5.0):
    """Sends `number` to this process and waits for `until()`: Python runs handlers in the
    main thread soon after, not always before os.kill returns (another thread may get it)."""
    os.kill(os.getpid(), number)
    deadline = time.monotonic() + timeout_s
    while not until() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_sigterm_is_recorded_as_a_stop_request_and_the_previous_handler_comes_back(recorded):
    seen, record = recorded
    with preemption.StopRequests() as stop:
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert not stop.requested(5) and not stop.pending
        send(signal.SIGTERM, lambda: stop.signal_name is not None)
        assert stop.signal_name == "SIGTERM"
        assert stop.requested(5) and stop.pending
        assert seen == []  # taken by StopRequests, not passed on
    assert signal.getsignal(signal.SIGTERM) is record
    assert signal.getsignal(signal.SIGINT) is record
    send(signal.SIGTERM, lambda: seen)
    assert seen == ["SIGTERM"]
    assert stop.signal_name == "SIGTERM"  # closed: it saw no more


@pytest.fixture
def exits(monkeypatch):
    """The ends a second Ctrl-C asked for: os._exit would end pytest, so they are recorded."""
    ended = []
    monkeypatch.setattr(cli, "exit_interrupted", ended.append)
    return ended


def test_a_first_ctrl_c_asks_to_stop_and_a_second_stops_at_once(recorded, exits, tmp_path):
    (tmp_path / "checkpoints" / "40").mkdir(parents=True)
    (tmp_path / "checkpoints" / "40" / "manifest.json").write_text("{}")
    with preemption.checkpoints_in(str(tmp_path)), preemption.StopRequests() as stop:
        send(signal.SIGINT, lambda: stop.signal_name is not None)
        assert stop.signal_name == "SIGINT" and stop.requested(1) and not exits
        send(signal.SIGINT, lambda: exits)
    assert [str(interrupted) for interrupted in exits] == [
        "a second Ctrl-C stopped the run at once, without saving; the latest checkpoint is "
        "step 40: run the same command to resume from it"
    ]
    assert exits[0].EXIT_CODE == 130
    assert signal.getsignal(signal.SIGINT) is recorded[1]


def test_a_second_ctrl_c_names_the_checkpoint_a_rerun_resumes_from(tmp_path):
    stopped = "a second Ctrl-C stopped the run at once, without saving; "
    assert str(preemption.second_ctrl_c(str(tmp_path))) == (
        stopped + "it has no checkpoint: the same command starts it over"
    )
    checkpoints = tmp_path / "checkpoints"
    for name in ("3", "20", "30"):
        (checkpoints / name).mkdir(parents=True)
        if name != "30":  # 30: a save in flight, its manifest not written yet
            (checkpoints / name / "manifest.json").write_text("{}")
    assert str(preemption.second_ctrl_c(str(tmp_path))) == (
        stopped + "the latest checkpoint is step 20: run the same command to resume from it"
    )
    for workdir in (None, "gs://bucket/run"):
        assert str(preemption.second_ctrl_c(workdir)) == (
            stopped + "run the same command to resume from its last checkpoint"
        )


def test_ctrl_c_after_sigterm_stops_at_once_and_a_second_sigterm_does_not(recorded, exits):
    with preemption.StopRequests() as stop:
        send(signal.SIGTERM, lambda: stop.signal_name is not None)
        send(signal.SIGTERM, lambda: False, timeout_s=0.2)
        assert stop.signal_name == "SIGTERM" and not exits
        send(signal.SIGINT, lambda: exits)
    assert len(exits) == 1
    assert signal.getsignal(signal.SIGTERM) is recorded[1]


def test_stop_requests_outside_the_main_thread_set_no_handler(recorded):
    seen, record = recorded
    handlers = []

    def enter():
        with preemption.StopRequests() as stop:
            handlers.append((signal.getsignal(signal.SIGTERM), stop.requested(1)))

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert handlers == [(record, False)]
    assert signal.getsignal(signal.SIGTERM) is record


def test_stop_at_once_exits_as_preempted_on_a_signal_and_restores_the_handlers(
    recorded, monkeypatch
):
    seen, record = recorded
    exits = []
    # os._exit would end pytest: the exit is recorded instead (it never returns in a run).
    monkeypatch.setattr(cli, "exit_preempted", exits.append)
    with preemption.stop_at_once("the end-of-run report"):
        assert signal.getsignal(signal.SIGTERM) not in (record, signal.SIG_DFL)
        send(signal.SIGTERM, lambda: exits)
        send(signal.SIGINT, lambda: len(exits) == 2)
    assert [str(stopped) for stopped in exits] == [
        "SIGTERM during the end-of-run report; the run was saved before it",
        "SIGINT during the end-of-run report; the run was saved before it",
    ]
    assert all(isinstance(stopped, preemption.Preempted) for stopped in exits)
    assert exits[0].EXIT_CODE == 75
    assert seen == []
    assert signal.getsignal(signal.SIGTERM) is record
    assert signal.getsignal(signal.SIGINT) is record


def test_stop_at_once_restores_the_handlers_when_its_work_raises(recorded):
    record = recorded[1]
    with pytest.raises(ValueError, match="the report failed"), preemption.stop_at_once("report"):
        raise ValueError("the report failed")
    assert signal.getsignal(signal.SIGTERM) is record
    assert signal.getsignal(signal.SIGINT) is record


def test_stop_at_once_outside_the_main_thread_sets_no_handler(recorded):
    record = recorded[1]
    handlers = []

    def work():
        with preemption.stop_at_once("work"):
            handlers.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert handlers == [record]


@pytest.mark.integration
def test_a_double_ctrl_c_during_a_run_is_one_line_and_status_130(
    finished_run, tmp_path, small_vocab_file
):
    # A run of 4 steps to its end (conftest.py's finished_run), copied.
    workdir = tmp_path / "run"
    shutil.copytree(finished_run["workdir"], workdir, ignore=shutil.ignore_patterns(".lock"))
    # The same run, made longer: it resumes from step 4 and compiles again, and the two
    # Ctrl-Cs come while it does, the first one's save still ahead.
    config_json = workdir / "config.json"
    written = config_json.stat().st_mtime_ns
    process = start(workdir, small_vocab_file, "--config.num_train_steps=100000")
    lines, asked = [], threading.Event()

    def read():
        for line in process.stderr:
            lines.append(line)
            if "saving at the next step boundary" in line:
                asked.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    while config_json.stat().st_mtime_ns == written:  # rewritten once the run listens
        assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    assert asked.wait(60), "".join(lines)  # the first one is taken: a second one is a second
    process.send_signal(signal.SIGINT)
    process.wait(120)
    reader.join(10)
    stderr = "".join(lines)
    assert process.returncode == 130, stderr  # once: a KeyboardInterrupt traceback
    ours = [line for line in lines if line.startswith(("error:", "stopped:", "interrupted:"))]
    assert ours == [
        "interrupted: a second Ctrl-C stopped the run at once, without saving; the latest "
        "checkpoint is step 4: run the same command to resume from it\n"
    ], stderr
    assert "Traceback" not in stderr, stderr
