"""bertjax.goodput on event logs written by hand: three processes (killed, preempted,
done) whose every second is known."""

import json
import subprocess
import sys

import pytest
from support import REPO

from bertjax import goodput


class Clock:
    """Writes events as a process would, each ending `seconds` after the last."""

    def __init__(self):
        self.now, self.events, self.compiled = 0.0, [], 0.0

    def process(self, *, after: float, startup: float, step: int):
        self.now += after
        started = self.now
        self.now += startup
        self.compiled = 0.0
        self.add("start", 0, host="vm", pid=len(self.events), started=started, step=step)

    def add(self, event: str, seconds: float, compile=0.0, **fields):
        self.now += seconds
        self.compiled += compile
        record = {"event": event, "time": self.now, "compile_total": self.compiled, **fields}
        if event not in ("start", "stop", "signal"):
            record |= {"seconds": seconds, "compile": compile}
        self.events.append(record)

    def steps(self, first, last, seconds, *, input_wait, compile=0.0):
        self.add(
            "steps",
            seconds,
            compile,
            first=first,
            last=last,
            input_wait=input_wait,
            flops=1e9 * (last - first + 1),
            peak_flops=1e10,
        )


def three_processes() -> list[dict]:
    clock = Clock()
    # 1: trains 1-15, saves 10, killed after 15: steps 11-15 (4.5 s of training) are lost.
    clock.process(after=0, startup=10, step=0)
    clock.steps(1, 1, 6, input_wait=0.5, compile=5)
    clock.steps(2, 10, 9, input_wait=0.9)
    clock.add("checkpoint", 1, step=10, bytes=100)
    clock.steps(11, 15, 5, input_wait=0.5)
    # 2: starts 10 s later, resumes from 10, trains to 20, SIGTERM: saved at 20.
    clock.process(after=10, startup=9, step=10)
    clock.add("restore", 2, step=10)
    clock.steps(11, 20, 10, input_wait=0.5, compile=3)
    clock.add("eval", 2, compile=1, step=20)
    clock.add("signal", 0, name="SIGTERM", step=20)
    clock.add("checkpoint", 1, step=20, bytes=100)
    clock.add("checkpoint_commit", 0.5, step=20)
    clock.add("stop", 0.5, step=20, reason="preempted")
    # 3: starts 4 s later, trains 21-30, done.
    clock.process(after=4, startup=5, step=20)
    clock.add("restore", 1, step=20)
    clock.steps(21, 30, 10, input_wait=1, compile=2)
    clock.add("checkpoint_commit", 0.5, step=30)
    clock.add("stop", 0, step=30, reason="done")
    return clock.events


def test_the_tool_reads_the_file_the_loop_writes():
    from bertjax import workdir

    assert goodput.EVENTS_FILE == workdir.EVENTS_FILE


def test_every_second_is_given_to_its_cause():
    result = goodput.account(three_processes())
    seconds = result["seconds"]
    assert seconds == pytest.approx(
        {
            # 1: 0.5 + 8.1 kept, 4.5 lost; 2: 10 - 0.5 - 3; 3: 10 - 1 - 2
            "productive": 0.5 + 8.1 + 6.5 + 7,
            "lost": 4.5,
            "compile": 5 + 4 + 2,
            "input_wait": 0.5 + 0.9 + 0.5 + 0.5 + 1,
            "checkpoints": 1 + 2 + 1 + 0.5 + 1 + 0.5,
            "evaluation": 1,
            "idle": 10 + 4,
            # startup, and a stop event half a second after the last span
            "startup": 10 + 9 + 0.5 + 5,
        }
    )
    wall = 31 + 10 + 25 + 4 + 16.5  # each process, and the gaps between them
    assert result["wall_seconds"] == pytest.approx(wall)
    assert sum(seconds.values()) == pytest.approx(wall)
    assert sum(result["fractions"].values()) == pytest.approx(1)
    assert (result["steps_kept"], result["steps_lost"]) == (30, 5)
    assert result["mfu_productive"] == pytest.approx(30e9 / (seconds["productive"] * 1e10))
    assert result["mfu_overall"] == pytest.approx(30e9 / (wall * 1e10))


def test_each_process_says_how_it_ended_and_what_it_lost():
    rows = goodput.account(three_processes())["processes"]
    assert [(r["resumed_from"], r["last_step"], r["ended"]) for r in rows] == [
        (0, 15, "killed"),
        (10, 20, "preempted (SIGTERM)"),
        (20, 30, "done"),
    ]
    assert [r["steps_lost"] for r in rows] == [5, 0, 0]
    assert [r["idle_after"] for r in rows] == pytest.approx([10, 4, 0])


def test_a_window_across_the_step_resumed_from_loses_only_the_steps_after_it():
    clock = Clock()
    clock.process(after=0, startup=1, step=0)
    clock.steps(1, 10, 10, input_wait=0)
    clock.process(after=1, startup=1, step=6)  # a checkpoint at 6 inside the window
    clock.steps(7, 10, 4, input_wait=0)
    result = goodput.account(clock.events)
    assert (result["steps_lost"], result["steps_kept"]) == (4, 10)
    assert result["seconds"]["lost"] == pytest.approx(4)
    assert result["seconds"]["productive"] == pytest.approx(6 + 4)


def reported_again(events: list[dict], *, after: float, reason="done") -> list[dict]:
    """`events` and a process hours later that trained no step: bertjax.main run again on
    the finished run restores step 30, evaluates it and stops `reason`."""
    clock = Clock()
    clock.now = events[-1]["time"]
    clock.process(after=after, startup=6, step=30)
    clock.add("restore", 1, step=30)
    clock.add("eval", 2, step=30)
    clock.add("checkpoint_commit", 0.5, step=30)
    clock.add("stop", 0, step=30, reason=reason)
    return events + clock.events


def test_a_process_run_again_on_the_finished_run_adds_nothing():
    finished = goodput.account(three_processes())
    again = reported_again(three_processes(), after=3 * 3600)
    twice = reported_again(again, after=600)
    for events in (again, twice):
        result = goodput.account(events)
        assert result["wall_seconds"] == pytest.approx(finished["wall_seconds"])
        assert result["seconds"] == pytest.approx(finished["seconds"])
        assert result["processes"][:3] == finished["processes"]
    rows = goodput.account(twice)["processes"]
    assert [row["counted"] for row in rows] == [True, True, True, False, False]
    assert (rows[3]["resumed_from"], rows[3]["ended"], rows[3]["seconds"]) == (30, "done", 9.5)


def test_a_resume_that_trains_no_step_still_counts():
    # Preempted, or failed, while restoring: time the run lost (not the wait before it:
    # the run was finished until then).
    finished = goodput.account(three_processes())
    for reason in ("preempted", "error"):
        result = goodput.account(reported_again(three_processes(), after=100, reason=reason))
        assert result["wall_seconds"] == pytest.approx(finished["wall_seconds"] + 9.5)
        assert result["seconds"]["idle"] == pytest.approx(finished["seconds"]["idle"])
        assert [row["counted"] for row in result["processes"]] == [True] * 4
    # A resume after a kill -9 (no stop event) that finds the last step saved.
    killed = three_processes()[:-1]
    result = goodput.account(reported_again(killed, after=100))
    assert [row["counted"] for row in result["processes"]] == [True] * 4


def test_a_finished_run_made_longer_counts_its_new_process_but_not_the_wait_before_it():
    # Hours after it finished at step 30, the run is resumed with a larger num_train_steps.
    finished = goodput.account(three_processes())
    clock = Clock()
    clock.now = three_processes()[-1]["time"]
    clock.process(after=5 * 3600, startup=6, step=30)
    clock.add("restore", 1, step=30)
    clock.steps(31, 40, 10, input_wait=1, compile=2)
    clock.add("checkpoint_commit", 0.5, step=40)
    clock.add("stop", 0, step=40, reason="done")
    result = goodput.account(three_processes() + clock.events)
    assert result["wall_seconds"] == pytest.approx(finished["wall_seconds"] + 17.5)
    assert result["seconds"]["idle"] == pytest.approx(finished["seconds"]["idle"])
    assert result["seconds"]["productive"] == pytest.approx(finished["seconds"]["productive"] + 7)
    assert result["steps_kept"] == 40
    rows = result["processes"]
    assert [row["counted"] for row in rows] == [True] * 4
    assert (rows[2]["idle_after"], rows[2]["finished_after"]) == (0.0, 5 * 3600)
    text = goodput.format_report("runs/x", result)
    assert text.splitlines()[0].endswith("counted (less the time it was finished)")
    assert "steps 21 to 30 in 16.5 s, done, then finished for 5:00:00 (not counted)" in text


def test_the_wait_after_a_process_paused_before_the_runs_end_is_idle():
    # train_and_evaluate's stop_after: the run is not finished, it waits for the next process.
    events = three_processes()[:-1]
    events.append({**three_processes()[-1], "reason": "paused"})
    clock = Clock()
    clock.now = events[-1]["time"]
    clock.process(after=100, startup=6, step=30)
    clock.steps(31, 40, 10, input_wait=1)
    clock.add("stop", 0, step=40, reason="done")
    result = goodput.account(events + clock.events)
    finished = goodput.account(three_processes())
    assert result["seconds"]["idle"] == pytest.approx(finished["seconds"]["idle"] + 100)
    assert result["processes"][2]["idle_after"] == 100


def test_the_report_lists_a_process_not_counted():
    text = goodput.format_report(
        "runs/x", goodput.account(reported_again(three_processes(), after=7200))
    )
    assert text.splitlines()[0] == (
        "runs/x: 3 processes and 1 not counted, 30 steps kept, 5 trained again; wall time "
        "1:26 from the first start to the last event counted"
    )
    assert text.splitlines()[-1].endswith(
        ": nothing to train after 30 in 9.5 s, done; not counted: it started on the finished run"
    )


def test_the_report_names_each_cause_and_each_process(tmp_path):
    text = goodput.format_report("runs/x", goodput.account(three_processes()))
    assert text.splitlines()[0] == (
        "runs/x: 3 processes, 30 steps kept, 5 trained again; wall time 1:26 from the "
        "first start to the last event counted"
    )
    assert "  lost, trained again          4.5 s    5.2%" in text
    assert "steps 1 to 15 in 31.0 s, killed, 5 steps lost, then idle 10.0 s" in text
    assert "steps 11 to 20 in 25.0 s, preempted (SIGTERM), then idle 4.0 s" in text
    assert "MFU " in text


def write_log(workdir, events, tail: str = "") -> None:
    workdir.mkdir(exist_ok=True)
    lines = "".join(json.dumps(e) + "\n" for e in events)
    (workdir / "events.jsonl").write_text(lines + tail, encoding="utf-8")


def test_a_last_line_cut_short_by_a_kill_is_left_out(tmp_path):
    write_log(tmp_path, three_processes(), tail='{"event": "steps", "ti')
    assert goodput.read_events(str(tmp_path)) == three_processes()


def test_a_damaged_line_inside_the_log_is_named(tmp_path):
    events = three_processes()
    write_log(tmp_path, events[:3], tail="not json\n" + json.dumps(events[3]) + "\n")
    with pytest.raises(goodput.GoodputError, match=r"events.jsonl:4: not an event"):
        goodput.read_events(str(tmp_path))


def run_tool(*args):
    return subprocess.run(
        [sys.executable, "-m", "bertjax.goodput", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_tool_prints_the_table_or_json(tmp_path):
    write_log(tmp_path, three_processes())
    table = run_tool(str(tmp_path))
    assert table.returncode == 0, table.stderr
    assert "productive training" in table.stdout
    as_json = run_tool(str(tmp_path), "--json")
    assert json.loads(as_json.stdout)["steps_lost"] == 5


def test_a_workdir_without_an_event_log_is_one_line(tmp_path):
    result = run_tool(str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path}/events.jsonl: no such file (a run writes it from its first "
        "step; bertjax.main of an older bertjax did not)"
    ]


def test_the_end_of_run_line_gives_the_productive_share_and_the_largest_others(tmp_path):
    write_log(tmp_path, three_processes())
    assert goodput.summary_line(str(tmp_path)) == (
        "goodput: 26% of 1:26 trained the model (startup 28%, idle 16%, compile 13%, "
        f"checkpoints 7%, lost 5%, input wait 4%, evaluation 1%); python -m bertjax.goodput "
        f"{tmp_path} has the rest"
    )
