"""Where a run's time went, on `python -m bertjax.main` in subprocesses: a run stopped
with SIGTERM, resumed, killed with kill -9, resumed to the end. bertjax.goodput counts
the steps the kill lost and the gaps the test left between the processes; the profile
asked for is written and the run goes on; the input wait is logged. The same command
again on a finished run adds nothing to its goodput."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from faults_test import PREEMPTED, finish, start, train_lines, wait_until
from support import REPO

pytestmark = pytest.mark.integration

STEPS = 60
RUN = (
    f"--config.num_train_steps={STEPS}",
    "--config.checkpoint_every_steps=1000",  # no checkpoint but the ones a stop makes
    "--config.profile.steps=3,4",
)


def events(workdir) -> list[dict]:
    with open(os.path.join(workdir, "events.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def printed_steps(stdout: str) -> list[int]:
    return [int(m) for m in re.findall(r"^step +(\d+)/", stdout, re.M)]


def goodput(workdir) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "bertjax.goodput", workdir, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_goodput_counts_what_a_kill_lost_and_the_gaps_between_processes(tmp_path, small_vocab_file):
    workdir = str(tmp_path / "run")
    # 1: SIGTERM once 10 steps are logged; it saves the step in hand.
    process = start(workdir, small_vocab_file, *RUN)
    wait_until(lambda: len(train_lines(workdir)) >= 10, process)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == PREEMPTED, stderr
    saved = int(re.search(r"checkpoint (\d+) saved", stderr).group(1))
    assert printed_steps(stdout)[-1] == saved
    time.sleep(3)

    # 2: resumed, then killed with kill -9 at least 8 steps after that checkpoint.
    process = start(workdir, small_vocab_file, *RUN)
    wait_until(lambda: len(train_lines(workdir)) >= saved + 8, process)
    process.kill()
    stdout, _ = process.communicate(timeout=60)
    last_printed = printed_steps(stdout)[-1]
    # The log is written before the console line: the kill may fall between them.
    assert last_printed >= saved + 7
    time.sleep(5)

    # 3: resumed from the SIGTERM's checkpoint, to the end; warned of its input wait.
    code, stderr = finish(
        start(workdir, small_vocab_file, *RUN, "--config.input_wait_warning=0.0001")
    )
    assert code == 0, stderr
    assert len(re.findall(r"\] input: steps \d+ to \d+ waited for the host pipeline", stderr)) == 1

    result = goodput(workdir)
    first, killed, last = result["processes"]
    assert (first["ended"], first["resumed_from"], first["steps_lost"]) == (
        "preempted (SIGTERM)",
        0,
        0,
    )
    assert (killed["ended"], killed["resumed_from"]) == ("killed", saved)
    # The log is written before the console line: the kill may fall between them.
    assert killed["steps_lost"] in (last_printed - saved, last_printed - saved + 1)
    assert (last["ended"], last["resumed_from"], last["last_step"]) == ("done", saved, STEPS)
    assert result["steps_kept"] == STEPS
    assert result["steps_lost"] == killed["steps_lost"]
    # The gaps the test left, plus each process's exit after its last event.
    assert 3 <= first["idle_after"] < 3 + 15
    assert 5 <= killed["idle_after"] < 5 + 15
    assert result["seconds"]["idle"] == pytest.approx(first["idle_after"] + killed["idle_after"])
    assert result["seconds"]["lost"] > 0
    assert sum(result["seconds"].values()) == pytest.approx(result["wall_seconds"])

    # The profile of steps 3 and 4, and the steps after it.
    profiles = [e for e in events(workdir) if e["event"] == "profile"]
    assert [(e["first"], e["last"]) for e in profiles] == [(3, 4)]
    traces = [
        name for _, _, names in os.walk(profiles[0]["dir"]) for name in names
        if name.endswith(".xplane.pb")
    ]  # fmt: skip
    assert len(traces) == 1
    # Each step logged with the time it waited for input.
    lines = train_lines(workdir)
    assert [line["step"] for line in lines] == list(range(1, STEPS + 1))
    assert all(0 <= line["input_wait_fraction"] <= 1 for line in lines)
    assert all(line["input_wait_seconds"] >= 0 for line in lines)


def test_the_same_command_again_on_a_finished_run_adds_no_idle_time(
    finished_run, tmp_path, small_vocab_file
):
    # A run trained to its end (conftest.py's finished_run), copied.
    workdir = str(tmp_path / "run")
    shutil.copytree(finished_run["workdir"], workdir, ignore=shutil.ignore_patterns(".lock"))

    def goodput_line(stdout: str) -> str:
        return next(line for line in stdout.splitlines() if line.startswith("goodput: "))

    # Its line names its workdir: this copy's, here.
    trained = goodput_line(finished_run["stdout"]).replace(finished_run["workdir"], workdir)
    finished = goodput(workdir)
    time.sleep(3)  # the time between the two commands: no part of the run
    # Nothing to train: it restores, evaluates and reports.
    process = start(workdir, small_vocab_file, *finished_run["overrides"])
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == 0, stderr
    reported = goodput_line(stdout)
    result = goodput(workdir)
    assert [row["counted"] for row in result["processes"]] == [True, False]
    assert result["wall_seconds"] == pytest.approx(finished["wall_seconds"])
    assert result["seconds"]["idle"] == 0
    assert reported == trained  # the finished run's goodput, both times
