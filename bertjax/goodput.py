r"""Where a run's wall time went: goodput, read from its event log.

    python -m bertjax.goodput WORKDIR [--json]

From WORKDIR/events.jsonl (bertjax.events), over every process that worked in the
workdir: the wall time from the first process's start to the last event, and its
parts by cause, as time and as a fraction of the whole. A process started on a
finished run (bertjax.main run again to show the report: it trains no step and stops
done, after a process that stopped done) is listed, not counted: neither its time nor
the wait before it is the run's, which ends with the last process counted. Nor is the
wait before a process that trains on after a finished run (one made longer: a larger
num_train_steps): the run was finished, not waiting.

  productive    training steps that the run kept
  compile       JAX tracing and compiling (or loading from the compilation cache)
  input wait    steps waiting for the host pipeline
  checkpoints   saving (the loop's pause; orbax writes on in the background),
                waiting for the last save to commit, restoring and verifying
  evaluation    held-out evaluations
  lost          steps trained after the last checkpoint before a process ended and
                trained again by the next one (kill -9, preemption, a crash)
  idle          from one process's end to the next one's start, unless it ended done;
                after a kill -9 the end is its last event, so time it trained after
                that counts here
  startup       the rest of each process: imports, devices, building the input
                pipeline and the train state, the end-of-run work

plus MFU over productive time and over all of it (the kept steps' model FLOPs). With
--json, one JSON object with the same figures.
"""

import dataclasses
import datetime
import json
import os

from absl import app, flags

from bertjax import program
from data_pipeline import files
from data_pipeline.errors import UserError

FLAGS = flags.FLAGS
EVENTS_FILE = "events.jsonl"  # bertjax.workdir.EVENTS_FILE (this tool imports no TensorFlow)
CAUSES = (
    ("productive", "productive training"),
    ("compile", "compile"),
    ("input_wait", "input wait"),
    ("checkpoints", "checkpoints"),
    ("evaluation", "evaluation"),
    ("lost", "lost, trained again"),
    ("idle", "idle between processes"),
    ("startup", "startup and other"),
)
CHECKPOINT_SPANS = ("checkpoint", "checkpoint_commit", "restore")


class GoodputError(UserError):
    """A workdir whose event log cannot be read."""


@dataclasses.dataclass
class Process:
    """One process's work in the workdir: its events from `start` to the next start."""

    start: dict
    events: list
    resumed_from: int

    @property
    def began(self) -> float:
        return self.start.get("started", self.start["time"])

    @property
    def stop(self) -> dict | None:
        return next((e for e in self.events if e["event"] == "stop"), None)

    @property
    def ended(self) -> float:
        return (self.stop or self.events[-1])["time"]

    def spans(self, *kinds) -> list[dict]:
        return [e for e in self.events if e["event"] in kinds]

    def outside(self, *kinds) -> float:
        """Seconds in spans of `kinds`, less their compile time."""
        return sum(e["seconds"] - e["compile"] for e in self.spans(*kinds))


def read_events(workdir: str) -> list[dict]:
    """The events of WORKDIR/events.jsonl, without a last line cut short by a kill."""
    path = os.path.join(workdir, EVENTS_FILE)
    if not files.exists(path):
        raise GoodputError(
            f"{path}: no such file (a run writes it from its first step; bertjax.main "
            "of an older bertjax did not)"
        )
    lines = files.read_bytes(path).decode("utf-8", errors="replace").splitlines()
    events = []
    for number, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
            if not isinstance(event, dict) or "event" not in event or "time" not in event:
                raise ValueError("not an event")
        except ValueError as error:
            if number == len(lines):
                break  # written when the process was killed
            raise GoodputError(f"{path}:{number}: not an event ({error})") from None
        events.append(event)
    return events


def processes(events: list[dict]) -> list[Process]:
    """The events split by process; each knows the step it resumed from."""
    found = []
    for event in events:
        if event["event"] == "start":
            found.append(Process(event, [event], resumed_from=event.get("step", 0)))
        elif found:
            found[-1].events.append(event)
            if event["event"] == "restore":
                found[-1].resumed_from = event["step"]
    return found


def counted(runs: list[Process]) -> list[bool]:
    """Whether each process counts toward the run: all but one started on a finished run,
    which found nothing to train (no step, stopped done) after a process that stopped
    done, as bertjax.main run again to show the report does."""
    flags, last_counted = [], None
    for run in runs:
        found_it_finished = (
            last_counted is not None
            and _reason(last_counted) == "done"
            and _reason(run) == "done"
            and not run.spans("steps")
        )
        flags.append(not found_it_finished)
        if not found_it_finished:
            last_counted = run
    return flags


def _reason(run: Process) -> str | None:
    return (run.stop or {}).get("reason")


def account(events: list[dict]) -> dict:
    """Where the wall time of the processes in `events` went (what --json prints). A
    process started on a finished run (`counted`) adds nothing, neither its time nor
    the wait before it: its row says so. Nor does the wait after a process that ended
    done, before one that trains on (`finished_after` in its row)."""
    found = processes(events)
    if not found:
        raise GoodputError("the event log has no process start")
    runs = [run for run, counts in zip(found, counted(found), strict=True) if counts]
    seconds = dict.fromkeys((name for name, _ in CAUSES), 0.0)
    kept_steps = lost_steps = 0
    kept_flops = finished = 0.0
    peak = None
    rows = []
    for index, run in enumerate(runs):
        following = runs[index + 1] if index + 1 < len(runs) else None
        # Steps after the step the next process resumed from were trained again.
        redo_after = following.resumed_from if following else None
        trained = lost = 0.0
        run_lost_steps = 0
        for window in run.spans("steps"):
            count = window["last"] - window["first"] + 1
            own = window["seconds"] - window["input_wait"] - window["compile"]
            redone = 0 if redo_after is None else min(count, max(0, window["last"] - redo_after))
            trained += own
            lost += own * redone / count
            run_lost_steps += redone
            kept_steps += count - redone
            kept_flops += window["flops"] * (count - redone) / count
            seconds["input_wait"] += window["input_wait"]
            peak = window.get("peak_flops") or peak
        seconds["productive"] += trained - lost
        seconds["lost"] += lost
        lost_steps += run_lost_steps
        evaluation, checkpoints = run.outside("eval"), run.outside(*CHECKPOINT_SPANS)
        seconds["evaluation"] += evaluation
        seconds["checkpoints"] += checkpoints
        compiled = max(e.get("compile_total", 0.0) for e in run.events)
        seconds["compile"] += compiled
        waited = sum(w["input_wait"] for w in run.spans("steps"))
        spent = trained + waited + evaluation + checkpoints + compiled
        seconds["startup"] += max(0.0, run.ended - run.began - spent)
        gap = max(0.0, following.began - run.ended) if following else 0.0
        done = _reason(run) == "done"
        finished += gap if done else 0.0
        seconds["idle"] += 0.0 if done else gap
        rows.append(_process_row(run, run_lost_steps, gap, done))
    wall = runs[-1].ended - runs[0].began - finished
    by_process = {id(run): row for run, row in zip(runs, rows, strict=True)}
    result = {
        "wall_seconds": wall,
        "seconds": seconds,
        "fractions": {name: value / wall if wall > 0 else 0.0 for name, value in seconds.items()},
        "steps_kept": kept_steps,
        "steps_lost": lost_steps,
        "processes": [
            by_process.get(id(run)) or {**_process_row(run, 0, 0.0, False), "counted": False}
            for run in found
        ],
        "peak_flops": peak,
    }
    if peak:
        result["mfu_productive"] = kept_flops / (seconds["productive"] * peak or float("inf"))
        result["mfu_overall"] = kept_flops / (wall * peak or float("inf"))
    return result


def _process_row(run: Process, lost_steps: int, gap: float, done: bool) -> dict:
    stop = run.stop
    windows = run.spans("steps")
    signal = next((e["name"] for e in run.events if e["event"] == "signal"), None)
    return {
        "host": run.start.get("host"),
        "pid": run.start.get("pid"),
        "started": run.began,
        "seconds": run.ended - run.began,
        "resumed_from": run.resumed_from,
        "last_step": windows[-1]["last"] if windows else run.resumed_from,
        "ended": (stop["reason"] if stop else "killed") + (f" ({signal})" if signal else ""),
        "error": (stop or {}).get("error"),
        "steps_lost": lost_steps,
        "idle_after": 0.0 if done else gap,
        "finished_after": gap if done else 0.0,
        "counted": True,
    }


def format_report(workdir: str, result: dict) -> str:
    """The table `python -m bertjax.goodput` prints."""
    wall = result["wall_seconds"]
    runs = result["processes"]
    count = sum(run["counted"] for run in runs)
    finished_for = sum(run["finished_after"] for run in runs)
    uncounted = f" and {len(runs) - count} not counted" if count < len(runs) else ""
    lines = [
        f"{workdir}: {count} process{'es' if count > 1 else ''}{uncounted}, "
        f"{result['steps_kept']} steps kept, {result['steps_lost']} trained again; "
        f"wall time {_duration(wall)} from the first start to the last event counted"
        + (" (less the time it was finished)" if finished_for else ""),
        "",
    ]
    for name, label in CAUSES:
        value = result["seconds"][name]
        lines.append(f"  {label:<24}{_duration(value):>10}  {result['fractions'][name]:6.1%}")
    if result.get("peak_flops"):
        lines += [
            "",
            f"MFU {result['mfu_productive']:.1%} over productive time, "
            f"{result['mfu_overall']:.1%} over all of it "
            f"(peak {result['peak_flops']:.3g} FLOP/s)",
        ]
    lines += ["", "processes:"]
    for number, run in enumerate(runs, 1):
        started = datetime.datetime.fromtimestamp(run["started"]).strftime("%Y-%m-%d %H:%M:%S")
        lost = f", {run['steps_lost']} steps lost" if run["steps_lost"] else ""
        idle = f", then idle {_duration(run['idle_after'])}" if run["idle_after"] else ""
        if run["finished_after"]:
            idle = f", then finished for {_duration(run['finished_after'])} (not counted)"
        error = f": {run['error']}" if run["error"] else ""
        steps = (
            f"steps {run['resumed_from'] + 1} to {run['last_step']}"
            if run["last_step"] > run["resumed_from"]
            else f"no step trained after {run['resumed_from']}"
        )
        if not run["counted"]:
            steps = f"nothing to train after {run['resumed_from']}"
        counts = "" if run["counted"] else "; not counted: it started on the finished run"
        lines.append(
            f"  {number}. {started} pid {run['pid']} on {run['host']}: {steps} in "
            f"{_duration(run['seconds'])}, {run['ended']}{error}{lost}{idle}{counts}"
        )
    return "\n".join(lines)


def productive_fraction(workdir: str) -> float | None:
    """The share of the workdir's wall time that trained the model; None without an event
    log (a run that never started training)."""
    try:
        return account(read_events(workdir))["fractions"]["productive"]
    except GoodputError:
        return None


def summary_line(workdir: str) -> str:
    """One line for the end of a run: the productive share and the largest other causes."""
    result = account(read_events(workdir))
    fractions = result["fractions"]
    others = sorted(
        (
            (fractions[name], name.replace("_", " "))
            for name, _ in CAUSES[1:]
            if fractions[name] >= 0.005
        ),
        reverse=True,
    )
    rest = ", ".join(f"{label} {value:.0%}" for value, label in others)
    return (
        f"goodput: {fractions['productive']:.0%} of {_duration(result['wall_seconds'])} trained "
        f"the model ({rest}); python -m bertjax.goodput {workdir} has the rest"
    )


def _duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{rest:02d}" if hours else f"{minutes}:{rest:02d}"


def define_flags() -> None:
    flags.DEFINE_bool("json", False, "Print one JSON object instead of the table.")


def main(argv) -> None:
    if len(argv) != 2:
        raise app.UsageError("give one workdir: python -m bertjax.goodput WORKDIR [--json]")
    workdir = argv[1]
    result = account(read_events(workdir))
    print(json.dumps(result) if FLAGS.json else format_report(workdir, result))


if __name__ == "__main__":
    program.run(main, define_flags, positional_args=True)
