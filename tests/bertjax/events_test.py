"""The event log: what each line holds, the steps windows between spans, compile time
counted from JAX's own duration events, and why a process stopped."""

import json
import time

import jax
import jax.numpy as jnp
import psutil
import pytest

from bertjax import events
from data_pipeline.errors import Preempted


def read(workdir) -> list[dict]:
    with open(workdir / "events.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_compile_seconds_count_a_new_jit_and_not_a_cached_one():
    before = events.compile_seconds()
    compiled = jax.jit(lambda x: jnp.tanh(x) * 3.0 + x.shape[0])
    compiled(jnp.ones(17)).block_until_ready()
    after_compile = events.compile_seconds()
    assert after_compile > before
    compiled(jnp.ones(17)).block_until_ready()
    assert events.compile_seconds() == after_compile


def test_a_program_loaded_from_the_persistent_cache_is_counted_once():
    # JAX times the load inside its backend-compile event and again on its own; counted
    # twice, a loaded run's compile time outgrew its steps' and goodput went negative.
    # (conftest.py gives the tests a persistent compilation cache.)
    durations = []

    def record(name, seconds, **kwargs):
        del kwargs
        durations.append((name, seconds))

    def function():  # a new function each time: traced again, so the cache is asked
        return lambda x: jnp.sin(x) * 7.0 + x.shape[0]

    jax.monitoring.register_event_duration_secs_listener(record)
    try:
        jax.jit(function())(jnp.ones(23)).block_until_ready()  # compiled, then stored
        durations.clear()
        before = events.compile_seconds()
        jax.jit(function())(jnp.ones(23)).block_until_ready()  # loaded
        counted = events.compile_seconds() - before
    finally:
        jax.monitoring.unregister_event_duration_listener(record)
    names = [name for name, _ in durations]
    assert "/jax/compilation_cache/cache_retrieval_time_sec" in names  # it was loaded
    traced_lowered_loaded = sum(s for n, s in durations if n.startswith("/jax/core/compile/"))
    assert counted == pytest.approx(traced_lowered_loaded, abs=1e-9)


def test_steps_windows_leave_the_spans_out_and_carry_input_wait_and_flops(tmp_path):
    log = events.EventLog(str(tmp_path))
    log.start(1)
    times = events.StepTimes(log, 1, peak_flops=1e12)
    times.waited(0.25)
    time.sleep(0.05)
    times.stepped(2, flops=4.0)  # the process's first step: flushed
    with times.span("eval", 2):
        time.sleep(0.2)
    time.sleep(0.05)
    times.stepped(3, flops=6.0)
    times.flush(3)
    times.flush(3)  # nothing new: no event
    log.stop(None)
    log.close()
    start, first, evaluation, second, stop = read(tmp_path)
    assert start["event"] == "start" and start["step"] == 1
    assert start["started"] <= start["time"]
    assert (first["event"], first["first"], first["last"]) == ("steps", 2, 2)
    assert first["input_wait"] == 0.25 and first["flops"] == 4.0
    assert first["peak_flops"] == 1e12
    assert 0.05 <= first["seconds"] < 0.2
    assert (evaluation["event"], evaluation["step"]) == ("eval", 2)
    assert evaluation["seconds"] >= 0.2
    assert (second["first"], second["last"], second["input_wait"]) == (3, 3, 0.0)
    assert second["flops"] == 6.0
    assert 0.05 <= second["seconds"] < 0.2  # the evaluation is not in it
    assert (stop["event"], stop["reason"], stop["step"]) == ("stop", "done", 3)
    assert all("compile_total" in e and e["time"] > 0 for e in read(tmp_path))


def test_a_span_that_raises_writes_no_event_and_the_window_starts_after_it(tmp_path):
    log = events.EventLog(str(tmp_path))
    times = events.StepTimes(log, 4, peak_flops=None)
    with pytest.raises(ValueError), times.span("checkpoint", 4, bytes=1):
        time.sleep(0.1)
        raise ValueError("disk")
    times.flush(5)
    log.close()
    (window,) = read(tmp_path)
    assert (window["event"], window["first"], window["seconds"] < 0.1) == ("steps", 5, True)


@pytest.mark.parametrize(
    "error, reason",
    [
        (Preempted("SIGTERM at step 3"), "preempted"),
        (KeyboardInterrupt(), "interrupted"),
        (ValueError("bad batch\nsecond line"), "error"),
    ],
)
def test_the_stop_event_says_why(tmp_path, error, reason):
    log = events.EventLog(str(tmp_path))
    log.start(7)
    log.stop(error)
    log.close()
    stop = read(tmp_path)[-1]
    assert (stop["reason"], stop["step"]) == (reason, 7)
    if reason == "error":
        assert stop["error"] == "ValueError: bad batch"


def test_a_process_asked_to_stop_before_the_runs_last_step_is_paused(tmp_path):
    log = events.EventLog(str(tmp_path))
    log.start(0)
    log.stop(None, paused=True)
    log.close()
    assert read(tmp_path)[-1]["reason"] == "paused"


def test_the_log_is_appended_to_by_each_process(tmp_path):
    for step in (0, 5):
        log = events.EventLog(str(tmp_path))
        log.start(step)
        log.close()
    assert [e["step"] for e in read(tmp_path)] == [0, 5]


def test_the_process_start_is_before_now_and_within_a_second_of_psutils():
    started = events.process_started()
    assert started < time.time()
    assert abs(started - psutil.Process().create_time()) < 1.5


def test_steps_are_written_after_the_first_and_whenever_the_window_grows_old(tmp_path):
    log = events.EventLog(str(tmp_path))
    times = events.StepTimes(log, 10, peak_flops=None, every_seconds=0.2)
    for step in range(11, 16):
        times.stepped(step)  # 11: the process's first step
    time.sleep(0.25)
    times.stepped(16)
    times.stepped(17)
    log.close()
    assert [(e["first"], e["last"]) for e in read(tmp_path)] == [(11, 11), (12, 16)]
