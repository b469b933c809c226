r"""Trains on Cloud TPU from your machine: creates a slice, ships the code, starts and stops runs.

    python -m bertjax.tpu.launch create --name NAME --zone ZONE --accelerator_type v5p-32 \
        [--spot | --reserved] [--queued] [--num_slices N] [--project P]
    python -m bertjax.tpu.launch setup --name NAME --zone ZONE
    python -m bertjax.tpu.launch run --name NAME --zone ZONE --accelerator_type v5p-32 \
        --config experiments/pretrain/bert_base.py --workdir gs://BUCKET/runs/base \
        [--config.KEY=VALUE ...]
    python -m bertjax.tpu.launch logs --name NAME --zone ZONE [--lines N] [--follow]
    python -m bertjax.tpu.launch status|stop|delete --name NAME --zone ZONE
    python -m bertjax.tpu.launch create ... --startup_script --config FILE --workdir gs://... \
        [--config.KEY=VALUE ...]
    python -m bertjax.tpu.launch run|status|logs|stop|delete --xpk_cluster CLUSTER ...

Each subcommand is a short sequence of `gcloud` commands (`xpk` and `kubectl`
with --xpk_cluster). --dry_run prints them, one per line as a shell would run
them, and runs nothing. Otherwise they run one after the other, and the first
that fails stops the rest: `error: gcloud ... exited with status N`, exit
status 2. A bad flag is reported in one line before anything runs. Give every
subcommand the same --name, --zone and --project, and --queued or --num_slices
for a queued resource.

run and create --startup_script take --config FILE[:ARG] and --config.KEY=VALUE
as bertjax.main does, and the workers get them as written, in order. Before
any command, and with --dry_run too, the config is loaded here and checked as
bertjax.main checks it before training: an unknown key (with the closest known
one), a value of the wrong type, an inconsistent option, and against the
slice's chips and hosts the mesh and the batch sizes. What needs the run's
files (its data, the workdir) is checked on the workers; a fine-tuning
config's init_checkpoint is read from here, so give it as a gs:// URL.

create: a TPU VM (`gcloud compute tpus tpu-vm create`), or with --queued a
    queued resource, as multislice (--num_slices > 1) always is; --spot or
    --reserved picks the capacity, --runtime_version the image (the chip's
    default from bertjax.tpu.slices).
setup: packs this checkout's files that git tracks (`git ls-files --cached`:
    never a run's outputs; and --config if given), at most --max_archive_mib
    (the dry run shows the count and size), copies them to every worker,
    unpacks them into ~/bertjax (over what is there) and installs the pinned
    environment there:
    `pip install -r requirements.txt` and `pip install -e .[tpu]` in
    ~/bertjax/.venv. The TPU images are Ubuntu 22.04, whose python3 is 3.10;
    bertjax needs 3.11, so setup installs python3.11 from apt where python3 is
    older.
run: on every worker, stops the training left from before (SIGTERM, SIGKILL
    after --stop_timeout_s, then whatever else holds the TPU), removes libtpu's
    lock file and starts `bertjax.main` detached, appending to
    ~/bertjax/logs/run-HOSTNAME.log. On a slice of several hosts it adds
    --distributed, and the workdir must be in gs://: the hosts share no disk
    (a local workdir is relative to ~/bertjax). --config is a file of this
    checkout, shipped by setup. Running `run` again resumes from the workdir's
    latest checkpoint.
sweep: on every worker, stops what ran before and starts `bertjax.sweep worker
    --storage URL` detached (logs in ~/bertjax/logs/sweep-HOSTNAME.log): it takes
    trials of a sweep that `python -m bertjax.sweep run --storage URL --sweep_dir
    gs://...` started until none is left, --parallel at a time. Single-host
    slices only; a queued resource with --num_slices N gives N workers. stop,
    status and logs cover sweep workers too. The trials' configs come from the
    database, as the sweep's `run` wrote them, so sweep takes no --config.
status: the TPU's state, then on every worker the training process and the
    last lines of its log.
logs: the last --lines of every worker's log; --follow follows worker 0's.
stop: SIGTERM to the training on every worker: bertjax saves the step in hand
    and exits (status 75). Waits up to --stop_timeout_s for that; `run` resumes.
delete: the TPU VM, or the queued resource with its nodes.

--startup_script (create, with --config and a gs:// --workdir): the VM gets a
    boot script that trains by itself, so that a spot slice that is restarted,
    or preempted and created again, resumes from its latest checkpoint with
    nobody logging in. create uploads the code to WORKDIR/code/bertjax.tar.gz.
    At every boot the script, as root, fetches it into /opt/bertjax if missing
    (waiting for Cloud Storage to answer), installs the environment if missing,
    frees the TPU and starts training, logging to /opt/bertjax/logs, which
    status and logs read too. A run that fails is retried 3 times, 5 minutes
    apart: the workdir lease of a run killed without warning goes stale after
    10 minutes (bertjax.workdir). The code is fetched once per disk: to change
    it, delete and create again.

--xpk_cluster (run, status, logs, stop, delete): on a GKE cluster made with
    `xpk cluster create` instead of TPU VMs. run is `xpk workload create`: every
    host of the --num_slices slices runs bertjax.main in --docker_image, an
    image with this checkout as its working directory and the environment
    installed. JobSet restarts the workload up to --max_restarts times after a
    failure, a preemption included (exit status 75), and each restart resumes
    from the gs:// workdir. status is `xpk workload list`, logs is kubectl's,
    stop and delete are `xpk workload delete` (the pods get SIGTERM and
    --stop_timeout_s to save).
"""

import dataclasses
import itertools
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile

from absl import flags
from ml_collections import config_flags

from bertjax import program
from bertjax.tpu import slices
from data_pipeline.errors import UserError

FLAGS = flags.FLAGS

SUBCOMMANDS = ("create", "setup", "run", "sweep", "status", "logs", "stop", "delete")
REPO = pathlib.Path(__file__).resolve().parents[2]
# Files the launcher makes; dry runs show these names instead of temporary paths.
ARCHIVE = "<bertjax.tar.gz>"
STARTUP_SCRIPT = "<startup.sh>"
# Where the code, its venv and the logs live on a worker: the ssh user's home for
# setup and run, a root-owned directory for the startup script, which runs as root.
HOME_DIR = "~/bertjax"
BOOT_DIR = "/opt/bertjax"
LOGS = f"{HOME_DIR}/logs/*.log {BOOT_DIR}/logs/*.log"
# What pkill and pgrep look for: training, and sweep workers with their trials. The
# brackets keep the pattern from matching the remote shell whose command line holds it.
TRAINING = '"[b]ertjax[.](main|sweep)"'
XPK_CONTAINER = "jax-tpu"  # xpk's default --docker-name
INSTALL = {
    "gcloud": "install the Google Cloud CLI: https://cloud.google.com/sdk/docs/install",
    "xpk": "install it with `pip install xpk`",
    "kubectl": "install it with `gcloud components install kubectl`",
}


class LaunchError(UserError):
    """A launch that cannot go ahead: a bad flag or a missing tool."""


class CommandFailed(LaunchError):
    """One of the launch's commands exited with a failure."""


def define_flags() -> None:
    flags.DEFINE_string("name", None, "The TPU VM, queued resource or xpk workload.")
    flags.DEFINE_string("zone", None, "Its zone, e.g. us-central2-b.")
    flags.DEFINE_string("project", None, "Google Cloud project; gcloud's default if not given.")
    flags.DEFINE_string(
        "accelerator_type", None, "TPU slice (create, run): v4-8, v5e-8, v5p-32, v6e-16, ..."
    )
    flags.DEFINE_integer("num_slices", 1, "Slices of a multislice queued resource.")
    flags.DEFINE_bool("queued", False, "A queued resource rather than a TPU VM.")
    flags.DEFINE_bool("spot", False, "create: spot capacity (preemptible, cheaper).")
    flags.DEFINE_bool("reserved", False, "create: the project's reserved capacity.")
    flags.DEFINE_string("runtime_version", None, "create: TPU VM image; the chip's default.")
    flags.DEFINE_bool("startup_script", False, "create: a boot script that starts training.")
    config_flags.DEFINE_config_file(
        "config",
        None,
        "run, create --startup_script: experiment config file of this checkout, FILE or "
        "FILE:ARG; --config.KEY=VALUE sets a value, as for bertjax.main.",
        lock_config=True,
    )
    flags.DEFINE_string(
        "workdir",
        None,
        "run, create --startup_script: bertjax.main's --workdir; gs://... but on one host.",
    )
    flags.DEFINE_string("storage", None, "sweep: the sweep's database (postgresql://...).")
    flags.DEFINE_string("study_name", "sweep", "sweep: the sweep's name in the database.")
    flags.DEFINE_integer("parallel", 1, "sweep: trials at once on each worker.")
    flags.DEFINE_integer("lines", 100, "logs: lines of each log to show.")
    flags.DEFINE_bool("follow", False, "logs: follow worker 0's log.")
    flags.DEFINE_integer("stop_timeout_s", 60, "Seconds a stopped run gets to save and exit.")
    flags.DEFINE_string("xpk_cluster", None, "Run on this xpk GKE cluster instead of TPU VMs.")
    flags.DEFINE_string("docker_image", None, "xpk: image with this checkout and its environment.")
    flags.DEFINE_integer("max_restarts", 10, "xpk: restarts of the workload after a failure.")
    flags.DEFINE_bool("dry_run", False, "Print the commands instead of running them.")
    flags.DEFINE_float(
        "max_archive_mib", 100.0, "setup, create --startup_script: refuse a larger code archive."
    )


# ----------------------------------------------------------------------------- the plan


@dataclasses.dataclass
class Plan:
    """Commands to run in order, and the startup script they refer to, if any."""

    commands: list[list[str]]
    startup_script: str | None = None

    def uses(self, placeholder: str) -> bool:
        return any(placeholder in arg for command in self.commands for arg in command)

    def dry_run_text(self, archive: list[str] | None = None) -> str:
        """The commands as a shell would run them; `archive`: the files the code archive
        would hold, summed up in a line."""
        lines = []
        if self.uses(ARCHIVE):
            lines.append(
                f"# {ARCHIVE}: this checkout's files (git ls-files), packed by the launcher"
            )
            if archive is not None:
                lines.append(
                    f"#   {len(archive)} files, {_mib(archive):.1f} MiB before compression"
                )
        if self.startup_script is not None:
            lines.append(f"# {STARTUP_SCRIPT}: the startup script, written by the launcher:")
            lines += [f"#   {line}".rstrip() for line in self.startup_script.splitlines()]
        lines += [shlex.join(command) for command in self.commands]
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Training:
    """What `bertjax.main` runs: arguments already checked, config relative to the repo,
    `overrides` the --config.KEY=VALUE arguments as given."""

    config: str
    workdir: str
    overrides: tuple[str, ...]
    distributed: bool

    def command(self, python: str) -> str:
        args = ["--config", self.config, "--workdir", self.workdir]
        args += ["--distributed"] * self.distributed
        args += self.overrides
        return f"{python} -m bertjax.main {shlex.join(args)}"


@dataclasses.dataclass(frozen=True)
class Target:
    """How gcloud reaches a TPU VM or queued resource and its workers."""

    name: str
    zone: str
    project: str | None
    queued: bool

    @property
    def group(self) -> list[str]:
        return ["gcloud", "compute", "tpus", "queued-resources" if self.queued else "tpu-vm"]

    def where(self) -> list[str]:
        return [f"--zone={self.zone}"] + ([f"--project={self.project}"] if self.project else [])

    def workers(self, everywhere: bool) -> list[str]:
        which = "all" if everywhere else "0"
        return ([f"--node={which}"] if self.queued else []) + [f"--worker={which}"]

    def ssh(self, command: str, *, everywhere: bool = True) -> list[str]:
        return [
            *self.group,
            "ssh",
            self.name,
            *self.where(),
            *self.workers(everywhere),
            f"--command={command}",
        ]

    def scp(self, source: str, destination: str) -> list[str]:
        return [
            *self.group,
            "scp",
            source,
            f"{self.name}:{destination}",
            *self.where(),
            *self.workers(True),
        ]


# ------------------------------------------------------------- what runs on the workers


def install_steps(directory: str) -> list[str]:
    """Shell commands, to join with &&, that install the pinned environment into
    DIRECTORY/.venv; `directory` goes in unquoted, so that `~` expands."""
    python = (
        'if python3 -c "import sys; sys.exit(sys.version_info < (3, 11))"; then PY=python3; '
        "else PY=python3.11; command -v python3.11 >/dev/null || "
        "{ sudo apt-get -qq update && sudo DEBIAN_FRONTEND=noninteractive apt-get -qq "
        "-o DPkg::Lock::Timeout=600 install -y python3.11 python3.11-venv; }; fi"
    )
    venv = f"{directory}/.venv"
    return [
        python,
        f"{{ test -x {venv}/bin/python || $PY -m venv {venv}; }}",
        f"{venv}/bin/pip install -q --upgrade pip",
        f"{venv}/bin/pip install -q -r {directory}/requirements.txt",
        f'{venv}/bin/pip install -q -e {directory}"[tpu]"',
        f"touch {venv}/.installed",
    ]


def free_tpu_steps(stop_timeout_s: int) -> list[str]:
    """Shell commands, to join with ;, that stop the training left from before (giving it
    `stop_timeout_s` to save) and free the TPU."""
    return [
        f"sudo pkill -TERM -f {TRAINING}",
        wait_for_exit(stop_timeout_s),
        f"sudo pkill -KILL -f {TRAINING}",
        *release_tpu_steps("sudo "),
        'echo "$(hostname): TPU free"',
    ]


def release_tpu_steps(sudo: str) -> list[str]:
    """Ends whatever holds the TPU at once, and removes libtpu's lock file, which would
    keep the next process off the TPU."""
    return [
        f"{sudo}lsof -t /dev/accel* /dev/vfio/[0-9]* 2>/dev/null | xargs -r {sudo}kill -9",
        f"{sudo}rm -f /tmp/libtpu_lockfile",
    ]


def wait_for_exit(timeout_s: int) -> str:
    return f"for i in $(seq {timeout_s}); do pgrep -f {TRAINING} >/dev/null || break; sleep 1; done"


def tail_logs(lines: int, follow: bool = False) -> str:
    follow_flag = " -F" if follow else ""
    return (
        f"logs=$(ls {LOGS} 2>/dev/null); "
        f'if [ -z "$logs" ]; then echo "$(hostname): no logs yet"; '
        f"else tail -v -n {lines}{follow_flag} $logs; fi"
    )


def startup_script(name: str, training: Training, code_url: str) -> str:
    """The boot script of `create --startup_script` (see the module docstring)."""
    directory = BOOT_DIR
    install = " &&\n    ".join(install_steps(directory))
    release_tpu = "\n".join(release_tpu_steps(sudo=""))
    train = training.command(f"{directory}/.venv/bin/python")
    return f"""\
#!/bin/bash
# The startup script of TPU {name}, written by `python -m bertjax.tpu.launch create
# --startup_script`. It runs as root at every boot of every worker and starts or
# resumes training.
mkdir -p {directory}/logs
exec >>{directory}/logs/startup-$(hostname).log 2>&1
echo "boot at $(date)"
# gcloud is a snap on TPU VM images; a boot script's PATH may lack /snap/bin.
export PATH="$PATH:/snap/bin"

# The code, once per disk: a VM created again after a preemption has a new disk.
until [ -f {directory}/setup.cfg ]; do
  gcloud storage cp {shlex.quote(code_url)} /tmp/bertjax.tar.gz &&
    tar -xzf /tmp/bertjax.tar.gz -C {directory} || sleep 30
done

# The environment, once: .venv/.installed marks a finished install.
if [ ! -f {directory}/.venv/.installed ]; then
  rm -rf {directory}/.venv
  {install} || exit 1
fi

# Nothing from before may hold the TPU. (No `pkill -f` here: this script's own
# text, which a shell may hold in its command line, names the training.)
{release_tpu}

# Training resumes from the workdir's latest checkpoint. Status 75 is a stop request
# (`launch stop`, or a shutdown), 137 and 143 a kill: the next boot or `launch run`
# goes on. Other failures are retried: a run killed without warning holds the
# workdir's lease for 10 minutes.
train() {{
  for attempt in 1 2 3 4; do
    {train} && return
    status=$?
    case $status in 75|137|143) return ;; esac
    echo "training exited with status $status (attempt $attempt of 4)"
    [ $attempt -lt 4 ] && sleep 300
  done
}}
cd {directory} && train >>{directory}/logs/run-$(hostname).log 2>&1 </dev/null &
"""


# ------------------------------------------------------------------- the subcommands


def create(target: Target, tpu_slice: slices.Slice, options, training: Training | None) -> Plan:
    runtime = options.runtime_version or tpu_slice.chip.runtime_version
    command = [*target.group, "create", target.name, *target.where()]
    command += [f"--accelerator-type={tpu_slice.accelerator_type}"]
    if not target.queued:
        command += [f"--version={runtime}"]
    elif tpu_slice.num_slices > 1:
        command += [f"--runtime-version={runtime}"]
        command += [f"--node-count={tpu_slice.num_slices}", f"--node-prefix={target.name}"]
    else:
        command += [f"--runtime-version={runtime}", f"--node-id={target.name}"]
    command += ["--spot"] * options.spot + ["--reserved"] * options.reserved
    if training is None:
        return Plan([command])
    code_url = f"{training.workdir.rstrip('/')}/code/bertjax.tar.gz"
    command += [f"--metadata-from-file=startup-script={STARTUP_SCRIPT}"]
    upload = ["gcloud", "storage", "cp", ARCHIVE, code_url]
    upload += [f"--project={target.project}"] if target.project else []
    return Plan([upload, command], startup_script(target.name, training, code_url))


def setup(target: Target) -> Plan:
    unpack = [
        # Over what is there: ~/bertjax also holds the venv, the logs and maybe a workdir.
        f"mkdir -p {HOME_DIR}",
        f"tar -xzf ~/bertjax.tar.gz -C {HOME_DIR}",
        "rm ~/bertjax.tar.gz",
    ]
    steps = unpack + install_steps(HOME_DIR)
    return Plan([target.scp(ARCHIVE, "bertjax.tar.gz"), target.ssh(" && ".join(steps))])


def run(target: Target, training: Training, stop_timeout_s: int) -> Plan:
    program = training.command(f"{HOME_DIR}/.venv/bin/python")
    return _start_detached(target, program, "run", "started", stop_timeout_s)


def sweep_workers(target: Target, options) -> Plan:
    """On every worker: what ran before stopped, then `bertjax.sweep worker` detached."""
    worker = f"{HOME_DIR}/.venv/bin/python " + shlex.join(
        [
            *("-m", "bertjax.sweep", "worker", f"--storage={options.storage}"),
            f"--study_name={options.study_name}",
            f"--parallel={options.parallel}",
        ]
    )
    started = "sweep worker started"
    return _start_detached(target, worker, "sweep", started, options.stop_timeout_s)


def _start_detached(
    target: Target, program: str, log_name: str, started: str, stop_timeout_s: int
) -> Plan:
    """On every worker: the training left from before stopped, then `program` started
    detached, appending to logs/LOG_NAME-HOSTNAME.log; `started` says so."""
    log = f"{HOME_DIR}/logs/{log_name}-$(hostname).log"
    start = [
        f"test -x {HOME_DIR}/.venv/bin/python || "
        f'{{ echo "$(hostname): no {HOME_DIR}/.venv; run setup first" >&2; exit 1; }}',
        f"mkdir -p {HOME_DIR}/logs",
        f"cd {HOME_DIR}",
        # setsid and nohup: the program outlives the ssh session.
        f"setsid nohup {program} "
        f'>>{log} 2>&1 </dev/null & echo "$(hostname): {started}, logging to {log}"',
    ]
    # Two sessions: the shell that starts it must not be running when pkill looks.
    return Plan(
        [target.ssh("; ".join(free_tpu_steps(stop_timeout_s))), target.ssh("; ".join(start))]
    )


def check_sweep(options, tpu_slice: slices.Slice | None) -> None:
    if not options.storage:
        raise LaunchError("--storage: required for sweep (the database URL the sweep's `run` used)")
    if not re.match(r"[a-z0-9+]+://", options.storage) or options.storage.startswith("sqlite"):
        raise LaunchError(
            f"--storage={options.storage}: workers on TPU VMs need a database server they "
            "all reach (postgresql://USER:PASSWORD@HOST/DB), not a file"
        )
    if tpu_slice is not None and tpu_slice.hosts_per_slice > 1:
        raise LaunchError(
            f"--accelerator_type={options.accelerator_type}: a sweep worker runs its trials "
            "on one host; use single-host slices (a queued resource with --num_slices N "
            "gives N workers)"
        )
    if options.parallel < 1:
        raise LaunchError(f"--parallel={options.parallel}: must be at least 1")


def status(target: Target) -> Plan:
    describe = [*target.group, "describe", target.name, *target.where()]
    describe += ["--format=yaml(state)" if target.queued else "--format=yaml(state,health)"]
    processes = (
        f'echo "== $(hostname)"; pgrep -af {TRAINING} || echo "$(hostname): no training process"'
    )
    return Plan([describe, target.ssh(f"{processes}; {tail_logs(5)}")])


def logs(target: Target, lines: int, follow: bool) -> Plan:
    return Plan([target.ssh(tail_logs(lines, follow), everywhere=not follow)])


def stop(target: Target, stop_timeout_s: int) -> Plan:
    command = (
        f"if sudo pkill -TERM -f {TRAINING}; then {wait_for_exit(stop_timeout_s)}; "
        f"if pgrep -f {TRAINING} >/dev/null; then "
        f'echo "$(hostname): still running {stop_timeout_s} s after SIGTERM" >&2; exit 1; fi; '
        f'echo "$(hostname): stopped"; else echo "$(hostname): no training process"; fi'
    )
    return Plan([target.ssh(command)])


def delete(target: Target) -> Plan:
    command = [*target.group, "delete", target.name, *target.where()]
    command += ["--force", "--quiet"] if target.queued else ["--quiet"]
    return Plan([command])


# ----------------------------------------------------------------------------- xpk


def xpk(
    subcommand: str, options, tpu_slice: slices.Slice | None, training: Training | None
) -> Plan:
    where = [f"--cluster={options.xpk_cluster}"]
    zone = Target(options.name, options.zone, options.project, queued=False).where()
    if subcommand == "run":
        command = ["xpk", "workload", "create", *where, f"--workload={options.name}"]
        command += [
            f"--tpu-type={tpu_slice.accelerator_type}",
            f"--num-slices={tpu_slice.num_slices}",
            f"--docker-image={options.docker_image}",
            f"--max-restarts={options.max_restarts}",
            # Without it xpk reports every exit as success, a preemption's 75 included.
            "--restart-on-user-code-failure",
            f"--termination-grace-period-seconds={options.stop_timeout_s}",
            *zone,
            f"--command={training.command('python3')}",
        ]
        return Plan([command])
    if subcommand == "status":
        return Plan([["xpk", "workload", "list", *where, f"--filter-by-job={options.name}", *zone]])
    if subcommand in ("stop", "delete"):
        command = ["xpk", "workload", "delete", *where, f"--workload={options.name}", *zone]
        return Plan([command + ["--force"]])
    # logs: kubectl, pointed at the cluster as xpk does (clusters are regional).
    region = options.zone.rsplit("-", 1)[0]
    credentials = ["gcloud", "container", "clusters", "get-credentials", options.xpk_cluster]
    credentials += [f"--region={region}"]
    credentials += [f"--project={options.project}"] if options.project else []
    selector = f"jobset.sigs.k8s.io/jobset-name={options.name}"
    if options.follow:  # worker 0 of slice 0
        selector += ",jobset.sigs.k8s.io/job-index=0,batch.kubernetes.io/job-completion-index=0"
    command = ["kubectl", "logs", f"--selector={selector}", f"--container={XPK_CONTAINER}"]
    command += ["--prefix", f"--tail={options.lines}"] + ["--follow"] * options.follow
    return Plan([credentials, command])


# ------------------------------------------------------------------- checking the flags


def parse_subcommand(args: list[str]) -> str:
    if not args:
        raise LaunchError(f"no subcommand; give one of {', '.join(SUBCOMMANDS)}")
    if args[0] not in SUBCOMMANDS:
        raise LaunchError(f"unknown subcommand {args[0]!r}; one of {', '.join(SUBCOMMANDS)}")
    if len(args) > 1:
        raise LaunchError(f"unexpected argument {args[1]!r}: give one subcommand, then --flags")
    return args[0]


def check_name(name: str | None, *, xpk_workload: bool) -> str:
    if not name:
        raise LaunchError("--name: required (the TPU VM, queued resource or workload)")
    limit = 40 if xpk_workload else 63
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) or len(name) > limit:
        raise LaunchError(
            f"--name={name}: use lowercase letters, digits and hyphens, starting with a letter "
            f"and ending with a letter or digit, at most {limit} characters"
        )
    return name


def check_slice(subcommand: str, options) -> slices.Slice | None:
    if options.accelerator_type is None:
        if subcommand in ("create", "run"):
            raise LaunchError(f"--accelerator_type: required for {subcommand} (e.g. v5p-32)")
        return None
    return slices.parse(
        options.accelerator_type, num_slices=options.num_slices, option="--accelerator_type"
    )


def config_overrides(argv: list[str]) -> tuple[str, ...]:
    """The --config.KEY=VALUE arguments of the command line `argv` (flag files read), in
    order, each as one argument: `--config.KEY VALUE` joined by `=`, `--[no]config.KEY`
    (a boolean) as it is."""
    argv = FLAGS.read_flags_from_files(argv, force_gnu=False)
    overrides = []
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            break
        match = re.match(r"--?((no)?config\.([^=]+))(=.*)?\Z", arg, flags=re.DOTALL)
        if not match:
            continue
        name, negated, key, value = match.groups()
        if value is None and not negated and not FLAGS[f"config.{key}"].boolean:
            value = "=" + next(args, "")
        overrides.append(f"--{name}{value or ''}")
    return tuple(overrides)


def check_training(
    options, tpu_slice: slices.Slice, why_gcs: str | None, needs: str, overrides: tuple[str, ...]
) -> Training:
    """The training command's arguments, its config checked for the slice; `why_gcs` says
    why the workdir must be in gs://, `needs` what needs them."""
    if not options["config"].present:
        raise LaunchError(f"--config: required {needs}")
    if not options.workdir:
        raise LaunchError(f"--workdir: required {needs}")
    if why_gcs and not options.workdir.startswith("gs://"):
        raise LaunchError(f"--workdir={options.workdir}: must be gs://BUCKET/...: {why_gcs}")
    training = Training(
        config=repo_relative_config(config_file(options)),
        workdir=options.workdir,
        overrides=overrides,
        distributed=tpu_slice.hosts > 1,
    )
    check_config(options.config, tpu_slice, options.accelerator_type)
    return training


def check_config(config, tpu_slice: slices.Slice, accelerator_type: str) -> None:
    """What bertjax.main checks of the config before it trains (its keys and values were
    checked as --config loaded): the task's checks, then the mesh and the batch sizes
    against the slice's chips and hosts. Starts no backend and reads no data (a fine-tuning
    config's init checkpoint is read for its model config, as bertjax.main reads it)."""
    # Imported here, not at the top: the trainer's imports take seconds.
    from bertjax import train

    train.check_config(config)
    slice_flags = f"--accelerator_type={accelerator_type}" + (
        f" --num_slices={tpu_slice.num_slices}" if tpu_slice.num_slices > 1 else ""
    )
    if config.platform not in ("tpu", "any"):
        raise LaunchError(
            f"config.platform={config.platform!r}, but {slice_flags} is a TPU slice "
            "(--config.platform=tpu runs it there)"
        )
    try:
        train.check_devices(
            config,
            devices=tpu_slice.devices_count,
            hosts=tpu_slice.hosts,
            slices=tpu_slice.num_slices,
            per_host=tpu_slice.chips // tpu_slice.hosts_per_slice,
        )
    except UserError as error:
        raise LaunchError(
            f"{error} ({slice_flags}: {tpu_slice.devices_count} chips on {tpu_slice.hosts} "
            f"host{'s' * (tpu_slice.hosts > 1)})"
        ) from None


def config_file(options) -> str | None:
    """--config as given (FILE or FILE:ARG), None if not given."""
    return options["config"].config_filename if options["config"].present else None


def repo_relative_config(config: str) -> str:
    """`config` (a file, maybe with `:ARGUMENT`) as the workers see it: relative to the repo."""
    file, colon, argument = config.partition(":")
    path = pathlib.Path(file).expanduser()
    if not path.is_file():
        raise LaunchError(f"--config={config}: no such file")
    try:
        relative = path.resolve().relative_to(REPO)
    except ValueError:
        raise LaunchError(
            f"--config={config}: not in this checkout ({REPO}), so the workers do not have it"
        ) from None
    return relative.as_posix() + colon + argument


def gcs_reason(subcommand: str, options, tpu_slice: slices.Slice | None) -> str | None:
    if options.xpk_cluster:
        return "an xpk workload's pods keep no disk across restarts"
    if subcommand == "create":
        return "a VM created again after a preemption has a new disk, and the code is shipped there"
    if tpu_slice.hosts > 1:
        return f"the {tpu_slice.hosts} hosts of a {tpu_slice.name} slice share no disk"
    return None


def check_overrides(subcommand: str, options, overrides: tuple[str, ...]) -> None:
    """Config overrides only where a run starts from the command line's config."""
    if not overrides or subcommand == "run":
        return
    if subcommand == "sweep":
        raise LaunchError(
            f"{overrides[0]}: sweep workers take their trials' configs from the sweep's "
            "database; give --config.KEY=VALUE to `python -m bertjax.sweep run`"
        )
    if subcommand != "create" or not options.startup_script:
        raise LaunchError(
            f"{overrides[0]}: only run and create --startup_script start training, "
            "with --config and its overrides"
        )


def plan(subcommand: str, options, overrides: tuple[str, ...] = ()) -> Plan:
    """The commands of `subcommand`, every flag checked; `overrides`: the --config.KEY=VALUE
    arguments as given (config_overrides)."""
    check_name(options.name, xpk_workload=bool(options.xpk_cluster))
    if not options.zone:
        raise LaunchError("--zone: required (e.g. us-central2-b)")
    if options.spot and options.reserved:
        raise LaunchError("--spot and --reserved: choose one")
    check_overrides(subcommand, options, overrides)
    if subcommand == "sweep" and options["config"].present:
        raise LaunchError(
            "--config: sweep workers take their trials' configs from the sweep's database"
        )
    tpu_slice = check_slice(subcommand, options)
    training = None
    if options.xpk_cluster:
        if subcommand in ("create", "setup", "sweep"):
            raise LaunchError(
                f"--xpk_cluster: no {subcommand} for xpk; make the cluster with "
                "`xpk cluster create`, and ship the code in --docker_image"
            )
        if options.spot or options.reserved:
            raise LaunchError("--spot, --reserved: an xpk workload gets its cluster's capacity")
        if subcommand == "run":
            if not options.docker_image:
                raise LaunchError("--docker_image: required with --xpk_cluster")
            why = gcs_reason(subcommand, options, None)
            training = check_training(options, tpu_slice, why, "for run", overrides)
        return xpk(subcommand, options, tpu_slice, training)

    queued = options.queued or options.num_slices > 1
    target = Target(options.name, options.zone, options.project, queued)
    if subcommand == "create":
        if options.startup_script:
            why = gcs_reason(subcommand, options, tpu_slice)
            training = check_training(options, tpu_slice, why, "with --startup_script", overrides)
        return create(target, tpu_slice, options, training)
    if subcommand == "setup":
        if options["config"].present:  # shipped too
            repo_relative_config(config_file(options))
        return setup(target)
    if subcommand == "run":
        why = gcs_reason(subcommand, options, tpu_slice)
        training = check_training(options, tpu_slice, why, "for run", overrides)
        return run(target, training, options.stop_timeout_s)
    if subcommand == "sweep":
        check_sweep(options, tpu_slice)
        return sweep_workers(target, options)
    if subcommand == "status":
        return status(target)
    if subcommand == "logs":
        return logs(target, options.lines, options.follow)
    if subcommand == "stop":
        return stop(target, options.stop_timeout_s)
    return delete(target)


# ------------------------------------------------------------------------- running it


def repository_files(extra: str | None = None) -> list[str]:
    """This checkout's files that git tracks, and `extra` (relative to REPO): never the
    outputs of runs, whatever .gitignore says of them."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = set(filter(None, listed.split("\0")))
    except (OSError, subprocess.CalledProcessError):  # no git, or not a git checkout
        names = set(_walk(REPO))
    if extra:
        names.add(extra)
    return sorted(name for name in names if (REPO / name).is_file())


def _walk(root: pathlib.Path):
    skipped = {".git", ".venv", ".venv-bench", "demo_out", "build", "__pycache__"}
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [
            d
            for d in subdirectories
            if d not in skipped and not d.endswith((".egg-info", "_cache"))
        ]
        for file in files:
            yield os.path.relpath(os.path.join(directory, file), root)


def archive_files(config: str | None, limit_mib: float) -> list[str]:
    """The files the code archive holds (the tracked ones and `config`), checked against
    `limit_mib` before anything is packed."""
    names = repository_files(config and repo_relative_config(config).partition(":")[0])
    total = _mib(names)
    if total > limit_mib:
        largest = sorted(names, key=lambda name: _mib([name]), reverse=True)[:3]
        shown = ", ".join(f"{name} ({_mib([name]):.1f} MiB)" for name in largest)
        raise LaunchError(
            f"the code archive would hold {total:.1f} MiB, over --max_archive_mib={limit_mib:g}; "
            f"largest: {shown}. Untrack what the workers do not need, or raise the limit"
        )
    return names


def _mib(names: list[str]) -> float:
    """The files' size in MiB (relative to REPO)."""
    return sum((REPO / name).stat().st_size for name in names) / 2**20


def pack(path: str, names: list[str]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name in names:
            archive.add(REPO / name, arcname=name, recursive=False)


def execute(plan: Plan, name: str, config: str | None, limit_mib: float) -> None:
    for program_name in dict.fromkeys(command[0] for command in plan.commands):
        if shutil.which(program_name) is None:
            raise LaunchError(f"{program_name}: not found on PATH; {INSTALL[program_name]}")
    names = archive_files(config, limit_mib) if plan.uses(ARCHIVE) else None
    with tempfile.TemporaryDirectory(prefix="bertjax-launch-") as scratch:
        files = {}
        if names is not None:
            files[ARCHIVE] = os.path.join(scratch, "bertjax.tar.gz")
            pack(files[ARCHIVE], names)
            megabytes = os.path.getsize(files[ARCHIVE]) / 2**20
            print(
                f"packed {len(names)} files ({megabytes:.1f} MiB) into {files[ARCHIVE]}", flush=True
            )
        if plan.startup_script is not None:
            # Kept after the launch, for reading: the VM has its own copy.
            script = pathlib.Path(tempfile.gettempdir()) / "bertjax-launch" / f"{name}-startup.sh"
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(plan.startup_script)
            files[STARTUP_SCRIPT] = str(script)
            print(f"startup script: {script}", flush=True)
        for command in plan.commands:
            for placeholder, path in files.items():
                command = [arg.replace(placeholder, path) for arg in command]
            print(f"+ {shlex.join(command)}", flush=True)
            returncode = subprocess.run(command).returncode
            if returncode != 0:
                raise CommandFailed(f"{_short(command)} exited with status {returncode}")


def _short(command: list[str]) -> str:
    """The command up to its first option: `gcloud compute tpus tpu-vm ssh NAME`."""
    return shlex.join(itertools.takewhile(lambda arg: not arg.startswith("-"), command))


def main(argv):
    subcommand = parse_subcommand(argv[1:])
    # The overrides as the command line gives them: ml_collections reads them there too.
    launch = plan(subcommand, FLAGS, config_overrides(sys.argv))
    config = config_file(FLAGS)
    if FLAGS.dry_run:
        names = archive_files(config, FLAGS.max_archive_mib) if launch.uses(ARCHIVE) else None
        print(launch.dry_run_text(names))
        return
    try:
        execute(launch, FLAGS.name, config, FLAGS.max_archive_mib)
    except KeyboardInterrupt:  # how `logs --follow` ends
        sys.exit(130)


if __name__ == "__main__":
    program.run(main, define_flags, positional_args=True)
