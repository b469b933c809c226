"""bertjax.bench.events times the loop's own instrumentation objects."""

import json

from bertjax.bench import events as events_bench


def test_the_instrumentation_is_timed_with_a_real_event_log(tmp_path):
    cost = events_bench.instrumentation_seconds(str(tmp_path), repeats=200)
    assert 0 < cost["per_step_s"] < cost["per_log_line_s"]
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").open()]
    steps = [e for e in lines if e["event"] == "steps"]
    assert lines[0]["event"] == "start"
    assert len(steps) > 100  # every timed log line wrote its event
