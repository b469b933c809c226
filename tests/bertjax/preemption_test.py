"""bertjax.preemption with real signals sent to this process.

Every test runs under `recorded`: SIGTERM and SIGINT go to a handler that only records
them, before and after the code under test, so no signal can end pytest.
"""

import os
import signal
import threading
import time

import pytest

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


def test_a_first_ctrl_c_asks_to_stop_and_a_second_stops_at_once(recorded):
    with preemption.StopRequests() as stop:
        send(signal.SIGINT, lambda: stop.signal_name is not None)
        assert stop.signal_name == "SIGINT" and stop.requested(1)
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGINT, lambda: False, timeout_s=5.0)
    assert signal.getsignal(signal.SIGINT) is recorded[1]


def test_ctrl_c_after_sigterm_stops_at_once_and_a_second_sigterm_does_not(recorded):
    with preemption.StopRequests() as stop:
        send(signal.SIGTERM, lambda: stop.signal_name is not None)
        send(signal.SIGTERM, lambda: False, timeout_s=0.2)
        assert stop.signal_name == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGINT, lambda: False, timeout_s=5.0)
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
