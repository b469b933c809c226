r"""Runs a sweep's trials: takes them from the queue, N at a time, each `bertjax.main` in its
own process on its own share of the devices.

A trial runs as

    python -m bertjax.main --config FILE[:ARG] --workdir SWEEP_DIR/trials/NNN-NAME \
        [the sweep's --config overrides] [the trial's --config overrides]

(or the sweep's own program in place of bertjax.main: `bertjax.suites glue run`'s trials
also predict GLUE's test sets)

with its output appended to SWEEP_DIR/trials/NNN-NAME.log (on this machine, in
~/bertjax-sweep-logs/, when SWEEP_DIR is in a bucket) and its overrides and
command in SWEEP_DIR/trials/NNN-NAME.json. Its share of the devices: on a CPU
host, its share of the cores (CPU affinity, which XLA's and TensorFlow's
thread pools follow); GPUs by CUDA_VISIBLE_DEVICES; TPU chips by
TPU_VISIBLE_CHIPS and the process bounds Google documents for several
processes on one TPU VM.

From the moment a worker takes a trial until it records its end, a thread of
its own records Optuna heartbeats (trial_queue.heartbeats), whatever the
slot is doing: importing, waiting for the workdir, watching the run. With
pruning the worker reports each evaluation of the metric to the pruner, which
may stop the trial (SIGTERM: the run saves and exits). A trial process dies
with its worker (the kernel sends it SIGTERM), so a killed worker leaves no
run behind, only a checkpoint to resume from.

A worker says when each trial starts (which of the sweep's trials it is, and once one
has finished, how long the rest take at the pace since the worker started) and ends,
and every 30 s how many trials are done, with the time left and the trials running.
"""

import glob
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings

import optuna

from bertjax.sweep import hyper, trial_queue
from bertjax.sweep.definition import SweepDefinition
from data_pipeline import files, progress
from data_pipeline.errors import Preempted, UserError

POLL_S = 1.0
# The statuses of a trial that is over (trial_queue.records).
FINISHED = ("done", "pruned", "failed")
# How long a trial may take to save and exit after SIGTERM before it is killed.
STOP_GRACE_S = 120.0
# The start of a trial's process, before it becomes `bertjax.main`: it is to get SIGTERM
# when its worker dies (the run then saves and exits, as on a preemption; the kernel's
# PR_SET_PDEATHSIG, kept across exec) and to keep to its share of the cores.
_LAUNCHER = """
import ctypes, os, signal, sys
parent, cpus = int(sys.argv[1]), sys.argv[2]
ctypes.CDLL(None).prctl(1, signal.SIGTERM)
if os.getppid() != parent:
    sys.exit(75)
if cpus:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
os.execv(sys.executable, [sys.executable, *sys.argv[3:]])
"""


def trial_name(index: int, params: dict) -> str:
    """`003-learning_rate=3e-05,num_train_epochs=2.0`: the index and the last part of each key."""
    parts = [f"{key.rsplit('.', 1)[-1]}={format_value(value)}" for key, value in params.items()]
    readable = re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(parts))[:120]
    return f"{index:03d}-{readable}" if readable else f"{index:03d}"


def format_value(value) -> str:
    """A value as `--config.KEY=VALUE` takes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def override_args(overrides: dict) -> list[str]:
    return [f"--config.{key}={format_value(value)}" for key, value in overrides.items()]


def trial_command(definition: SweepDefinition, workdir: str, params: dict) -> list[str]:
    return [
        sys.executable,
        "-m",
        definition.program,
        "--config",
        definition.config_flag,
        "--workdir",
        workdir,
        *override_args(definition.overrides),
        *override_args(params),
    ]


def device_shares(parallel: int) -> list[dict]:
    """What each of `parallel` trial processes on this host gets: {"cpus": set} or {"env": {}}."""
    tpu_chips = sorted(glob.glob("/dev/accel*")) or sorted(glob.glob("/dev/vfio/[0-9]*"))
    if tpu_chips:
        return tpu_shares(len(tpu_chips), parallel)
    gpus = _gpu_count()
    if gpus:
        return gpu_shares(gpus, parallel)
    return cpu_shares(sorted(os.sched_getaffinity(0)), parallel)


def cpu_shares(cpus: list[int], parallel: int) -> list[dict]:
    """Disjoint sets of cores; with fewer cores than trials, one core each, shared round-robin."""
    if parallel >= len(cpus):
        return [{"cpus": {cpus[i % len(cpus)]}} for i in range(parallel)]
    size = len(cpus) // parallel
    return [{"cpus": set(cpus[i * size : (i + 1) * size])} for i in range(parallel)]


def gpu_shares(count: int, parallel: int) -> list[dict]:
    _check_split(count, parallel, "GPUs")
    size = count // parallel
    return [
        {"env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(i * size, (i + 1) * size)))}}
        for i in range(parallel)
    ]


def tpu_shares(chips: int, parallel: int) -> list[dict]:
    """Chips per process as Google documents for several processes on one TPU VM: the
    visible chips, their bounds, and a port of each process's own."""
    _check_split(chips, parallel, "TPU chips")
    if parallel == 1:
        return [{"env": {}}]
    size = chips // parallel
    bounds = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1"}.get(size)
    if bounds is None:
        raise trial_queue.QueueError(
            f"--parallel={parallel}: {size} chips per trial is not a TPU share"
        )
    return [
        {
            "env": {
                "TPU_VISIBLE_CHIPS": ",".join(map(str, range(i * size, (i + 1) * size))),
                "TPU_CHIPS_PER_PROCESS_BOUNDS": bounds,
                "TPU_PROCESS_BOUNDS": "1,1,1",
                "TPU_PROCESS_PORT": str(8476 + i),
                "TPU_PROCESS_ADDRESSES": f"localhost:{8476 + i}",
            }
        }
        for i in range(parallel)
    ]


def _check_split(count: int, parallel: int, what: str) -> None:
    if count % parallel:
        raise trial_queue.QueueError(
            f"--parallel={parallel}: this host's {count} {what} do not split evenly"
        )


def _gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return listed.stdout.count("GPU ") if listed.returncode == 0 else 0


class Worker:
    """Takes trials from `study` on `parallel` slots until none is left or `stop` is set."""

    def __init__(
        self,
        study,
        definition: SweepDefinition,
        *,
        parallel: int,
        heartbeat_s: int,
        out=None,
        clock=time.monotonic,
    ):
        self.study, self.definition, self.clock = study, definition, clock
        self.shares = device_shares(parallel)
        self.heartbeat_s = heartbeat_s
        self.out = out or sys.stdout
        self.stop = threading.Event()
        self.stop_reason = ""
        self._children: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.progress = progress.Progress(
            f"sweep {definition.sweep_dir}",
            definition.num_trials,
            unit="trials done",
            done=finished_trials(study),
            out=self.out,
            clock=clock,
        )
        self._running: dict[str, float] = {}  # trial name -> when it started

    def run(self) -> None:
        """Works until the queue is empty; raises Preempted after a stop request."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            slots = [
                threading.Thread(target=self._slot, args=(share,), daemon=True)
                for share in self.shares
            ]
            for slot in slots:
                slot.start()
            while any(slot.is_alive() for slot in slots):
                for slot in slots:
                    slot.join(timeout=0.2)
                if self.progress.due():
                    self._report_progress()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if self.stop.is_set():
            raise Preempted(
                f"{self.stop_reason}: the trials in progress saved their checkpoints; "
                "run the same command to resume"
            )

    def _report_progress(self) -> None:
        self.progress.done = finished_trials(self.study)
        with self._lock:
            now = self.clock()
            running = ", ".join(
                f"{name} ({progress.format_duration(now - started)})"
                for name, started in sorted(self._running.items())
            )
            self.progress.report(note=f"running {running}" if running else "")

    def _on_signal(self, signum, frame) -> None:
        del frame
        if self.stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: at once
        self.stop_reason = signal.Signals(signum).name
        self.stop.set()
        with self._lock:
            for child in self._children:
                child.send_signal(signal.SIGTERM)

    def _slot(self, share: dict) -> None:
        while not self.stop.is_set():
            trial_queue.fail_gone_workers(self.study)
            trial = trial_queue.claim(self.study) or self._new_search_trial()
            if trial is None:
                if self._others_unfinished():
                    self.stop.wait(5 * POLL_S)
                    continue
                return
            with trial_queue.heartbeats(self.study, trial, self.heartbeat_s):
                self._run(trial, share)

    def _new_search_trial(self) -> optuna.Trial | None:
        if not self.definition.search:
            return None
        with self._lock:  # this worker's slots: one at a time, so they do not overshoot
            indices = {r.index for r in trial_queue.records(self.study)}
            if len(indices) >= self.definition.num_trials:
                return None
            with warnings.catch_warnings():  # the heartbeats are this worker's own
                warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
                trial = self.study.ask()
            trial.set_user_attr("index", trial.number)
            trial.set_user_attr("keys", list(self.definition.space))
            trial.set_user_attr("attempt", 1)
            return trial_queue.take(self.study, trial)

    def _others_unfinished(self) -> bool:
        return bool(
            self.study.get_trials(deepcopy=False, states=(trial_queue.WAITING, trial_queue.RUNNING))
        )

    def _run(self, trial: optuna.Trial, share: dict) -> None:
        attrs = trial.user_attrs
        index, attempt = attrs["index"], attrs["attempt"]
        params = suggest(trial, attrs["keys"], self.definition.space)
        name = trial_name(index, params)
        trials_dir = os.path.join(self.definition.sweep_dir, "trials")
        workdir = os.path.join(trials_dir, name)
        command = trial_command(self.definition, workdir, params)
        trial.set_user_attr("workdir", workdir)
        files.atomic_write_json(
            os.path.join(trials_dir, name + ".json"),
            {"index": index, "overrides": params, "command": command},
        )
        # Imported here, not at the top: bertjax.sweep's command imports this module, and
        # its --help and a bad sweep answer before TensorFlow and JAX load.
        from bertjax import workdir as workdir_lib

        # A run of this trial stopped a moment ago (its worker killed) may still be saving.
        workdir_lib.wait_until_free(workdir, STOP_GRACE_S)
        if trial_queue.frozen_trial(self.study, trial).state != trial_queue.RUNNING:
            self._say(f"trial {name}: given up as stale meanwhile; its queued copy goes on")
            return
        records = trial_queue.records(self.study)
        self.progress.done = sum(r.status in FINISHED for r in records)
        place = 1 + sum(r.index < index for r in records)  # a search's indices have gaps
        pace = f"; {self.progress.status()}" if self.progress.left() is not None else ""
        total = self.definition.num_trials
        self._say(f"trial {name}: started (attempt {attempt}), {place} of {total}{pace}")
        started = self.clock()
        log_file = os.path.join(log_dir(trials_dir), name + ".log")
        with self._lock:
            self._running[name] = started
        try:
            status, pruned = self._watch(trial, command, workdir, share, log_file)
        finally:
            with self._lock:
                self._running.pop(name, None)
        minutes = (self.clock() - started) / 60
        try:
            self._record(trial, name, status, pruned, workdir, log_file, minutes)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker found this one silent for the grace period (stopped, or a
            # database too busy for its heartbeats) while its run held no lock it could see,
            # and queued the trial again. That attempt resumes the same workdir, and finds
            # the run finished if it is.
            self._say(f"trial {name}: given up as stale meanwhile; its queued copy goes on")

    def _record(self, trial, name, status, pruned, workdir, log_file, minutes) -> None:
        """Ends the attempt by the run's exit: done, pruned, interrupted or failed."""
        from bertjax import workdir as workdir_lib

        results = workdir_lib.read_results(workdir)
        for key in ("eval", "best", "best_metric"):
            if key in results:
                trial.set_user_attr(key, results[key])
        if pruned:
            self.study.tell(trial, state=trial_queue.PRUNED)
            self._say(f"trial {name}: pruned after {minutes:.1f} min")
        elif status == 0:
            self._complete(trial, name, results, minutes)
        elif status in (Preempted.EXIT_CODE, -signal.SIGTERM) or self.stop.is_set():
            trial_queue.end_interrupted(self.study, trial, f"stopped (exit status {status})")
            self._say(f"trial {name}: stopped after {minutes:.1f} min; queued to resume")
        else:
            why = last_error(log_file, status)
            trial.set_user_attr("error", why)
            self.study.tell(trial, state=trial_queue.FAIL)
            # A user error (a bad option, a missing file) would be the same again.
            user_error = status == UserError.EXIT_CODE
            again = not user_error and trial_queue.requeue(
                self.study, trial_queue.frozen_trial(self.study, trial), failed=True
            )
            then = "queued again" if again else "not retried" if user_error else "no attempts left"
            self._say(f"trial {name}: failed: {why} ({then})")

    def _complete(self, trial, name: str, results: dict, minutes: float) -> None:
        metric = metric_name(self.definition, results)
        value = (results.get("eval") or {}).get(metric)
        if not isinstance(value, int | float) or not math.isfinite(value):
            trial.set_user_attr("error", f"results.json has no finite eval {metric}")
            self.study.tell(trial, state=trial_queue.FAIL)
            self._say(f"trial {name}: ended without a finite eval {metric}")
            return
        self.study.tell(trial, float(value))
        self._say(f"trial {name}: done in {minutes:.1f} min, {metric} {value:.4f}")

    def _watch(self, trial, command, workdir, share, log_file) -> tuple[int, bool]:
        """Runs the trial's process to its end: (exit status, whether it was pruned)."""
        env = {**os.environ, **share.get("env", {})}
        cpus = ",".join(map(str, sorted(share.get("cpus", ()))))
        launch = [sys.executable, "-c", _LAUNCHER, str(os.getpid()), cpus, *command[1:]]
        with open(log_file, "a") as log:
            log.write(f"\n$ {' '.join(command)}\n")
            log.flush()
            child = subprocess.Popen(
                launch,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C reaches the worker, which stops the trials
            )
        with self._lock:
            self._children.add(child)
            if self.stop.is_set():
                child.send_signal(signal.SIGTERM)
        pruned, reported = False, 0
        try:
            while child.poll() is None:
                time.sleep(POLL_S)
                if self.definition.prune and not pruned:
                    reported = report_evals(trial, self.definition, workdir, reported)
                    if trial.should_prune():
                        pruned = True
                        child.send_signal(signal.SIGTERM)
            return child.returncode, pruned
        finally:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    child.kill()
            with self._lock:
                self._children.discard(child)

    def _say(self, line: str) -> None:
        with self._lock:
            print(line, file=self.out, flush=True)


def finished_trials(study) -> int:
    """The sweep's trials that are over: done, pruned, or failed with no attempt left."""
    return sum(r.status in FINISHED for r in trial_queue.records(study))


def log_dir(trials_dir: str) -> str:
    """Where trial logs go: beside the workdirs, or on this machine for a bucket's."""
    if "://" not in trials_dir:
        return trials_dir
    local = os.path.join(
        os.path.expanduser("~/bertjax-sweep-logs"), re.sub(r"\W+", "_", trials_dir)
    )
    os.makedirs(local, exist_ok=True)
    return local


def suggest(trial: optuna.Trial, keys, space: dict[str, hyper.Choice | hyper.Range]) -> dict:
    """The trial's value of each key: its queued value, or the sampler's choice in a search."""
    params = {}
    for key in keys:
        part = space[key]
        if isinstance(part, hyper.Choice):
            params[key] = trial.suggest_categorical(key, list(part.values))
        else:
            params[key] = trial.suggest_float(key, part.low, part.high, log=part.log)
    return params


def metric_name(definition: SweepDefinition, results: dict) -> str:
    """The sweep's metric: --metric, else the one the run's own "best" follows."""
    return definition.metric or (results.get("best_metric") or {}).get("name", "")


def report_evals(
    trial: optuna.Trial, definition: SweepDefinition, workdir: str, reported: int
) -> int:
    """Reports the evaluations in metrics.jsonl after the first `reported` to the pruner."""
    from bertjax import workdir as workdir_lib

    evals = [r for r in workdir_lib.read_metrics(workdir) if r.get("split") == "eval"]
    metric = metric_name(definition, workdir_lib.read_results(workdir))
    for record in evals[reported:]:
        value = record.get(metric)
        if isinstance(value, int | float) and math.isfinite(value):
            trial.report(float(value), record["step"])
    return len(evals)


def last_error(log_file: str, status: int) -> str:
    """The last `error:` line of a trial's log, or its exit status."""
    try:
        with open(log_file, errors="replace") as f:
            lines = f.read().splitlines()[-200:]
    except OSError:
        lines = []
    errors = [line for line in lines if line.startswith("error: ")]
    if errors:
        return errors[-1][len("error: ") :]
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exit status {status}; see {log_file}"
