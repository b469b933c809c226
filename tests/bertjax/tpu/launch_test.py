"""bertjax.tpu.launch: the exact commands of each subcommand, run in order, and one-line errors.

The golden files in tests/testdata/launch/ hold what `--dry_run` prints for each
case in GOLDEN; read them as what a person would run. After a deliberate change
to the launcher, rewrite them with

    BERTJAX_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/bertjax/tpu/launch_test.py

and review the diff. Real (not dry) runs go to a fake `gcloud` on PATH that
logs its arguments and fails when asked to. No test reaches Google Cloud.
"""

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid

import pytest
import support
from absl import flags
from ml_collections import config_flags
from support import REPO

from bertjax.tpu import launch, slices
from data_pipeline.errors import UserError

GOLDEN_DIR = support.TESTDATA / "launch"
UPDATE_GOLDEN = os.environ.get("BERTJAX_UPDATE_GOLDEN") == "1"

BASE = ["--name", "bert-base", "--zone", "us-east5-a"]  # a v5p-32 slice: 4 hosts
TINY = ["--name", "bert-tiny", "--zone", "us-west4-a"]  # a v5e-8 slice: 1 host
BERT_BASE = ["--config", "experiments/pretrain/bert_base.py", "--workdir", "gs://BUCKET/runs/base"]
XPK = ["--xpk_cluster", "my-cluster"]
GOLDEN = {
    "create_spot": ["create", *TINY, "--accelerator_type", "v5e-8", "--spot"],
    "create_multislice_reserved": [
        "create",
        *BASE,
        *["--project", "my-project", "--accelerator_type", "v5p-32"],
        *["--num_slices", "2", "--reserved"],
    ],
    "create_startup_script": [
        "create",
        *BASE,
        *["--accelerator_type", "v5p-32", "--spot", "--startup_script", *BERT_BASE],
        "--config.data.vocab_file=gs://BUCKET/vocab.txt",
    ],
    "setup": ["setup", *BASE],
    "setup_multislice": ["setup", *BASE, "--num_slices", "2"],
    "run_single_host": [
        "run",
        *TINY,
        *["--accelerator_type", "v5e-8", "--config", "experiments/pretrain/bert_mini.py"],
        *["--workdir", "runs/mini", "--config.num_train_steps=10000"],
    ],
    # The example of the issue.
    "run_multi_host": ["run", *BASE, "--accelerator_type", "v5p-32", *BERT_BASE],
    # Sweep workers on the two v5e-8 nodes of a queued resource, sharing a PostgreSQL queue.
    "sweep_workers": [
        "sweep",
        *TINY,
        *["--accelerator_type", "v5e-8", "--num_slices", "2", "--parallel", "2"],
        *["--storage", "postgresql://bertjax:PASSWORD@10.128.0.2/sweeps", "--study_name", "mrpc"],
    ],
    "status": ["status", *BASE],
    "status_queued": ["status", *BASE, "--queued"],
    "logs": ["logs", *BASE],
    "logs_follow_multislice": ["logs", *BASE, "--num_slices", "2", "--follow", "--lines", "20"],
    "stop": ["stop", *BASE],
    "delete": ["delete", *BASE],
    "delete_queued": ["delete", *BASE, "--queued"],
    "xpk_run": [
        "run",
        *BASE,
        *XPK,
        *["--docker_image", "us-docker.pkg.dev/my-project/bertjax/bertjax:latest"],
        *["--accelerator_type", "v5p-32", "--num_slices", "2", *BERT_BASE],
        *["--config.train_batch_size", "512"],
    ],
    "xpk_status": ["status", *BASE, *XPK],
    "xpk_logs": ["logs", *BASE, *XPK, "--follow"],
    "xpk_delete": ["delete", *BASE, *XPK],
}

FAKE_GCLOUD = """\
#!{python}
# A stand-in for gcloud, xpk and kubectl: logs its arguments, keeps a copy of any
# archive it is given, and exits 1 when an argument contains $FAKE_GCLOUD_FAIL_ON.
import json, os, shutil, sys

log = os.environ["FAKE_GCLOUD_LOG"]
args = [os.path.basename(sys.argv[0]), *sys.argv[1:]]
with open(log, "a") as f:
    f.write(json.dumps(args) + "\\n")
for arg in args:
    if arg.endswith(".tar.gz") and os.path.isfile(arg):
        shutil.copy(arg, log + ".tar.gz")
fail_on = os.environ.get("FAKE_GCLOUD_FAIL_ON")
sys.exit(1 if fail_on and any(fail_on in arg for arg in args) else 0)
"""


def launcher(*args, env=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "bertjax.tpu.launch", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def fake_gcloud(tmp_path):
    """Env for the launcher with the fake gcloud (and xpk, kubectl) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("gcloud", "xpk", "kubectl"):
        fake = bin_dir / program
        fake.write_text(FAKE_GCLOUD.format(python=sys.executable))
        fake.chmod(0o755)
    log = tmp_path / "gcloud.log"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_GCLOUD_LOG": str(log),
        "TMPDIR": str(tmp_path),  # where the launcher keeps the startup script
    }
    return env, log


def calls(log: pathlib.Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def one_error_line(result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


# ---------------------------------------------------------------------- golden files


@pytest.mark.command
@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_dry_run_prints_the_golden_commands(case):
    result = launcher(*GOLDEN[case], "--dry_run")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    golden = GOLDEN_DIR / f"{case}.txt"
    # The archive's file count and size change with every commit: checked below instead.
    printed = ARCHIVE_SUMMARY.sub("", result.stdout)
    if UPDATE_GOLDEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(printed)
    assert golden.exists(), f"{golden} missing: run with BERTJAX_UPDATE_GOLDEN=1"
    assert printed == golden.read_text()


ARCHIVE_SUMMARY = re.compile(r"^#   (\d+) files, ([\d.]+) MiB before compression\n", re.M)


@pytest.mark.integration
def test_setup_ships_only_tracked_files_and_says_how_many_and_how_big():
    result = launcher(*GOLDEN["setup"], "--dry_run")
    (match,) = ARCHIVE_SUMMARY.finditer(result.stdout)
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    names = [
        name for name in tracked.split("\0") if name and os.path.isfile(os.path.join(REPO, name))
    ]
    assert int(match.group(1)) == len(names)
    total = sum(os.path.getsize(os.path.join(REPO, name)) for name in names) / 2**20
    assert float(match.group(2)) == pytest.approx(total, abs=0.05)


@pytest.mark.integration
def test_an_archive_over_the_limit_is_refused_before_any_command(fake_gcloud):
    env, log = fake_gcloud
    for dry_run in ([], ["--dry_run"]):
        result = launcher(*GOLDEN["setup"], "--max_archive_mib=0.5", *dry_run, env=env)
        assert result.returncode == 2
        error = one_error_line(result)
        assert "over --max_archive_mib=0.5; largest: " in error, error
    assert not calls(log)


def test_no_golden_file_is_left_over():
    assert {path.stem for path in GOLDEN_DIR.glob("*.txt")} == set(GOLDEN)


def remote_commands(text: str) -> list[str]:
    """The shell commands that ssh runs on the workers, from a dry run's output."""
    return [
        arg.removeprefix("--command=")
        for line in text.splitlines()
        if not line.startswith("#")
        for arg in shlex.split(line)
        if arg.startswith("--command=")
    ]


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_remote_commands_and_startup_script_are_valid_bash(case):
    text = (GOLDEN_DIR / f"{case}.txt").read_text()
    scripts = remote_commands(text)
    if "startup_script" in case:
        script = [line[4:] for line in text.splitlines() if line.startswith("#   ")]
        assert script[0] == "#!/bin/bash"
        scripts.append("\n".join(script))
    for script in scripts:
        check = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
        assert check.returncode == 0, (script, check.stderr)


def test_multi_host_run_is_distributed_and_single_host_is_not():
    multi = (GOLDEN_DIR / "run_multi_host.txt").read_text()
    assert "--distributed" in multi and "--worker=all" in multi
    single = (GOLDEN_DIR / "run_single_host.txt").read_text()
    assert "--distributed" not in single
    assert "--config.num_train_steps=10000" in single
    boot = (GOLDEN_DIR / "create_startup_script.txt").read_text()
    (train,) = [line for line in boot.splitlines() if "-m bertjax.main" in line]
    assert train.endswith(" --config.data.vocab_file=gs://BUCKET/vocab.txt && return")


# ------------------------------------------------------------------ real runs, fake gcloud


@pytest.mark.integration
def test_run_on_a_multi_host_slice_calls_gcloud_in_order(fake_gcloud):
    env, log = fake_gcloud
    result = launcher(*GOLDEN["run_multi_host"], env=env)
    assert result.returncode == 0, result.stderr
    free, start = calls(log)
    ssh = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "bert-base", "--zone=us-east5-a"]
    assert free[:8] == [*ssh, "--worker=all"] and start[:8] == [*ssh, "--worker=all"]
    assert "pkill -TERM" in free[8] and "/tmp/libtpu_lockfile" in free[8]
    assert (
        "~/bertjax/.venv/bin/python -m bertjax.main --config experiments/pretrain/bert_base.py "
        "--workdir gs://BUCKET/runs/base --distributed >>~/bertjax/logs/run-$(hostname).log"
    ) in start[8]
    assert "setsid nohup" in start[8]
    # What ran is what the dry run prints.
    dry_run = (GOLDEN_DIR / "run_multi_host.txt").read_text().splitlines()
    assert dry_run == [shlex.join(command) for command in (free, start)]


@pytest.mark.integration
def test_a_failing_command_stops_the_sequence_in_one_line(fake_gcloud):
    env, log = fake_gcloud
    result = launcher(*GOLDEN["run_multi_host"], env={**env, "FAKE_GCLOUD_FAIL_ON": "pkill"})
    assert result.returncode == 2
    assert one_error_line(result) == (
        "error: gcloud compute tpus tpu-vm ssh bert-base exited with status 1"
    )
    assert len(calls(log)) == 1  # training was not started


@pytest.mark.integration
def test_setup_ships_the_tracked_files_and_stops_when_the_copy_fails(fake_gcloud):
    env, log = fake_gcloud
    result = launcher(*GOLDEN["setup"], env={**env, "FAKE_GCLOUD_FAIL_ON": "scp"})
    assert result.returncode == 2
    assert one_error_line(result).startswith("error: gcloud compute tpus tpu-vm scp ")
    (scp,) = calls(log)  # no ssh after the failed copy
    assert scp[6:] == ["bert-base:bertjax.tar.gz", "--zone=us-east5-a", "--worker=all"]
    with tarfile.open(str(log) + ".tar.gz") as archive:
        names = set(archive.getnames())
    assert {"bertjax/tpu/launch.py", "requirements.txt", "setup.cfg"} <= names
    assert not any(name.startswith((".venv", ".git/", "demo_out")) for name in names)
    assert not os.path.exists(scp[5]), "the archive is removed after the launch"


@pytest.mark.integration
def test_create_with_a_startup_script_uploads_the_code_first(fake_gcloud, tmp_path):
    env, log = fake_gcloud
    result = launcher(*GOLDEN["create_startup_script"], env=env)
    assert result.returncode == 0, result.stderr
    upload, create = calls(log)
    assert upload[:3] == ["gcloud", "storage", "cp"]
    assert upload[4] == "gs://BUCKET/runs/base/code/bertjax.tar.gz"
    with tarfile.open(str(log) + ".tar.gz") as archive:
        assert "experiments/pretrain/bert_base.py" in archive.getnames()
    assert create[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "bert-base"]
    (metadata,) = [arg for arg in create if arg.startswith("--metadata-from-file=")]
    script = pathlib.Path(metadata.removeprefix("--metadata-from-file=startup-script="))
    assert script.parent == tmp_path / "bertjax-launch"
    assert f"startup script: {script}" in result.stdout
    text = script.read_text()
    assert "gcloud storage cp gs://BUCKET/runs/base/code/bertjax.tar.gz" in text
    assert "-m bertjax.main --config experiments/pretrain/bert_base.py" in text
    assert "--distributed" in text and "/tmp/libtpu_lockfile" in text


@pytest.mark.integration
def test_xpk_run_calls_xpk(fake_gcloud):
    env, log = fake_gcloud
    result = launcher(*GOLDEN["xpk_run"], env=env)
    assert result.returncode == 0, result.stderr
    (create,) = calls(log)
    assert create[:3] == ["xpk", "workload", "create"]
    assert "--tpu-type=v5p-32" in create and "--num-slices=2" in create
    assert create[-1] == (
        "--command=python3 -m bertjax.main --config experiments/pretrain/bert_base.py "
        "--workdir gs://BUCKET/runs/base --distributed --config.train_batch_size=512"
    )


@pytest.mark.integration
def test_missing_gcloud_is_one_line_and_runs_nothing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    # What a user runs first; a run, whose config is checked first, meets the same check.
    result = launcher(*GOLDEN["create_spot"], env={"PATH": str(empty)})
    assert result.returncode == 2
    assert one_error_line(result) == (
        "error: gcloud: not found on PATH; install the Google Cloud CLI: "
        "https://cloud.google.com/sdk/docs/install"
    )
    assert result.stdout == ""


# ---------------------------------------------------------------------------- bad input

RUN = ["run", *BASE, "--accelerator_type", "v5p-32"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "args, named",
    [
        (["create", *BASE, "--accelerator_type", "v3-8"], "--accelerator_type=v3-8"),
        (["run", *BASE, *BERT_BASE], "--accelerator_type"),
        (["status", "--name", "bert-base"], "--zone"),
        (["status", "--zone", "us-east5-a"], "--name"),
        (["status", "--name", "Bert_Base", "--zone", "us-east5-a"], "--name=Bert_Base"),
        ([*RUN, "--workdir", "gs://BUCKET/runs/base"], "--config"),
        ([*RUN, "--config", "experiments/pretrain/bert_base.py"], "--workdir"),
        ([*RUN, "--config", "experiments/pretrain/bert_base.py", "--workdir", "runs/base"],
         "--workdir=runs/base"),
        ([*RUN, "--config", "experiments/pretrain/nosuch.py", "--workdir", "gs://B/r"],
         "--config=experiments/pretrain/nosuch.py"),
        ([*RUN, *BERT_BASE, "--override", "num_train_steps=10"], "flag 'override'"),
        (["create", *BASE, "--accelerator_type", "v5p-32", "--spot", "--reserved"], "--spot"),
        (["create", *TINY, "--accelerator_type", "v5e-8", "--startup_script",
          "--config", "experiments/pretrain/bert_mini.py", "--workdir", "runs/mini"],
         "--workdir=runs/mini"),
        ([*RUN, *BERT_BASE, *XPK], "--docker_image"),
        (["setup", *BASE, *XPK], "--xpk_cluster"),
        (["sweep", *TINY], "--storage: required for sweep"),
        (["sweep", *TINY, "--storage", "sqlite:///sweep.db"], "--storage=sqlite:///sweep.db"),
        (["sweep", *BASE, "--accelerator_type", "v5p-32", "--storage", "postgresql://h/d"],
         "--accelerator_type=v5p-32: a sweep worker runs its trials on one host"),
        (["sweep", *TINY, *XPK, "--storage", "postgresql://h/d"], "--xpk_cluster"),
        (["sweep", *TINY, "--storage", "postgresql://h/d", *BERT_BASE[:2], "--config.seed=1"],
         "--config.seed=1: sweep workers take their trials' configs from the sweep's database"),
        (["sweep", *TINY, "--storage", "postgresql://h/d", *BERT_BASE[:2]],
         "--config: sweep workers take"),
        (["setup", *BASE, *BERT_BASE[:2], "--config.seed=1"],
         "--config.seed=1: only run and create --startup_script"),
        (["create", *BASE, "--accelerator_type", "v5p-32", *BERT_BASE, "--config.seed=1"],
         "--config.seed=1: only run and create --startup_script"),
        (["launch", *BASE], "unknown subcommand 'launch'"),
        (["status", "now", *BASE], "unexpected argument 'now'"),
        ([*BASE], "no subcommand"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_before_anything_runs(fake_gcloud, args, named):
    env, log = fake_gcloud
    result = launcher(*args, env=env)
    assert result.returncode == 2
    assert named in one_error_line(result)
    assert calls(log) == []


# ------------------------------------------------------ the config, checked before launching


@pytest.mark.integration
@pytest.mark.parametrize(
    "override, error",
    [
        ("--config.data.vocab_fle=x",
         "error: unknown config key: config.data.vocab_fle; did you mean config.data.vocab_file?"),
        ("--config.num_train_steps=abc",
         "error: flag --config.num_train_steps=abc: invalid literal for int() with base 10: "
         "'abc' (--help lists the flags)"),
    ],
)  # fmt: skip
def test_a_bad_config_key_or_value_is_one_line_before_any_command(fake_gcloud, override, error):
    env, log = fake_gcloud
    for dry_run in ([], ["--dry_run"]):
        result = launcher(*GOLDEN["run_multi_host"], override, *dry_run, env=env)
        assert result.returncode == 2
        assert one_error_line(result) == error
        assert result.stdout == ""
    assert calls(log) == []


STARTUP = ["create", *BASE, "--accelerator_type", "v5p-32", "--startup_script", *BERT_BASE]


@pytest.mark.integration
@pytest.mark.parametrize(
    "args, error, dry_run",
    [
        ([*GOLDEN["run_multi_host"], "--config.train_batch_size=100"],
         "error: config.train_batch_size=100 is not divisible by the data-parallel size 16 "
         "(mesh data=16 x fsdp=1) (--accelerator_type=v5p-32: 16 chips on 4 hosts)", False),
        ([*GOLDEN["run_multi_host"], "--config.train_batch_size=100"],
         "error: config.train_batch_size=100 is not divisible", True),
        ([*STARTUP, "--config.train_batch_size=100"],
         "error: config.train_batch_size=100 is not divisible", False),
    ],
)  # fmt: skip
def test_a_config_that_cannot_run_on_the_slice_is_refused_before_any_command(
    fake_gcloud, args, error, dry_run
):
    """The checks bertjax.main makes before training, against the slice's chips and hosts:
    refused by run, its dry run and create --startup_script (the checks' other findings
    are below, in this process)."""
    env, log = fake_gcloud
    result = launcher(*args, *["--dry_run"] * dry_run, env=env)
    assert result.returncode == 2
    assert one_error_line(result).startswith(error)
    assert result.stdout == ""
    assert calls(log) == []


@pytest.mark.integration
@pytest.mark.parametrize(
    "overrides, num_slices, error",
    [
        (["--config.num_eval_steps=0"], 1,
         "config.num_eval_steps=0 (the whole split) works on one host only; set it for "
         "this 4-host run (--accelerator_type=v5p-32: 16 chips on 4 hosts)"),
        (["--config.mesh.data=1", "--config.mesh.fsdp=-1"], 2,
         "config.mesh: the data axis (1) must be a multiple of the 2 slices, which only "
         "it spans (--accelerator_type=v5p-32 --num_slices=2: 32 chips on 8 hosts)"),
        (["--config.num_train_steps=100"], 1,
         "config.optimizer.warmup_steps=10000 is above num_train_steps=100"),
    ],
)  # fmt: skip
def test_the_slice_checks_of_a_config_name_what_cannot_run(overrides, num_slices, error):
    """What check_config (the check the test above reaches) finds in bert_base.py with these
    overrides, for a v5p-32 slice: the config loaded as --config loads it."""
    argv = ["launch", "--config", str(REPO / BERT_BASE[1]), *overrides]
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file(
        "config", None, "", flag_values=flag_values, lock_config=True, sys_argv=argv
    )
    flag_values(argv)
    tpu_slice = slices.parse("v5p-32", num_slices=num_slices, option="--accelerator_type")
    with pytest.raises(UserError) as refused:
        launch.check_config(flag_values.config, tpu_slice, "v5p-32")
    assert str(refused.value).startswith(error) and "\n" not in str(refused.value)


# Values as a shell would hand them over: spaces, quotes and shell syntax, each given
# in one of the forms absl takes.
OVERRIDES = [
    '--config.data.vocab_file=gs://BUCKET/it\'s a "vocab" $(touch PWNED) `id`.txt',
    *["--config.data.tfds_data_dir", "gs://BUCKET/tfds  data"],
    "--noconfig.data.do_lower_case",
    "--config.num_train_steps=100000",
]
AS_PASSED_ON = [
    '--config.data.vocab_file=gs://BUCKET/it\'s a "vocab" $(touch PWNED) `id`.txt',
    "--config.data.tfds_data_dir=gs://BUCKET/tfds  data",
    "--noconfig.data.do_lower_case",
    "--config.num_train_steps=100000",
]


@pytest.mark.integration
@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("bash", "setsid", "nohup")), reason="needs bash"
)
def test_workers_get_the_overrides_exactly_as_written(tmp_path):
    """What bertjax.main's argv holds on a worker, from run's ssh command and from the boot
    script, each run by bash with a stand-in python that records its arguments."""
    home = tmp_path / "home"
    python = home / "bertjax" / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    argv_file = tmp_path / "argv.json"
    recorder = tmp_path / "recorder.py"
    recorder.write_text(
        f"import json, sys\nopen({str(argv_file)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {recorder} "$@"\n')
    python.chmod(0o755)
    env = {**os.environ, "HOME": str(home)}
    expected = ["-m", "bertjax.main", "--config", "experiments/pretrain/bert_base.py"]
    expected += ["--workdir", "gs://BUCKET/runs/base", "--distributed", *AS_PASSED_ON]

    def argv_of(command: str) -> list[str]:
        argv_file.unlink(missing_ok=True)
        subprocess.run(["bash", "-c", command], cwd=home, env=env, check=True, timeout=60)
        deadline = time.monotonic() + 60
        while not argv_file.exists() and time.monotonic() < deadline:  # run's is detached
            time.sleep(0.1)
        return json.loads(argv_file.read_text())

    result = launcher(*GOLDEN["run_multi_host"], *OVERRIDES, "--dry_run")
    assert result.returncode == 0, result.stderr
    free, start = remote_commands(result.stdout)
    assert argv_of(start) == expected

    result = launcher(*STARTUP, *OVERRIDES, "--dry_run")
    assert result.returncode == 0, result.stderr
    (train,) = [line for line in result.stdout.splitlines() if "-m bertjax.main" in line]
    train = train.removeprefix("#").strip().removesuffix("&& return")
    assert train.startswith("/opt/bertjax/.venv/bin/python ")
    assert argv_of(train.replace("/opt/bertjax/.venv/bin/python", shlex.quote(str(python)))) == (
        expected
    )
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.integration
def test_importing_the_launcher_starts_neither_jax_nor_tensorflow():
    script = "import sys, bertjax.tpu.launch; print([m for m in ('jax', 'tensorflow') if m in sys.modules])"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stderr


# ------------------------------------------------- the remote commands on a stand-in worker


@pytest.mark.integration
@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("bash", "pkill", "pgrep", "setsid", "nohup")),
    reason="needs bash and procps",
)
def test_run_and_stop_commands_do_not_stop_their_own_shell(tmp_path, monkeypatch):
    """`run` starts a stand-in trainer; `run` again stops it (it saves on SIGTERM) and
    starts another; `stop` stops that. The pattern is narrowed to this test's trainer,
    so that no other bertjax.main on this machine is touched."""
    config = f"experiments/{uuid.uuid4().hex}.py"
    monkeypatch.setattr(launch, "TRAINING", f'"[b]ertjax.main --config {config}"')
    monkeypatch.setattr(launch, "release_tpu_steps", lambda sudo: ["true"])  # not this machine's
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    (home / "bertjax" / ".venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    trainer = tmp_path / "trainer.py"
    trainer.write_text(
        textwrap.dedent(
            """\
            import signal, sys, time
            def stop(*_):
                print("saved", flush=True)
                sys.exit(75)
            signal.signal(signal.SIGTERM, stop)
            print("training", flush=True)
            while True:
                time.sleep(0.1)
            """
        )
    )
    python = home / "bertjax" / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {trainer} "$@"\n')
    for script in (bin_dir / "sudo", python):
        script.chmod(0o755)
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def on_worker(command: list[str]) -> str:
        remote = command[-1].removeprefix("--command=")
        result = subprocess.run(
            ["bash", "-c", remote], cwd=home, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def log() -> list[str]:
        logs = list((home / "bertjax" / "logs").glob("run-*.log"))
        return logs[0].read_text().split() if logs else []

    def wait_for_training(count: int) -> None:  # its SIGTERM handler is set by then
        deadline = time.monotonic() + 60
        while log().count("training") < count and time.monotonic() < deadline:
            time.sleep(0.1)

    target = launch.Target("bert-base", "us-east5-a", None, False)
    training = launch.Training(config, "gs://BUCKET/runs/base", (), True)
    for count in (1, 2):
        free, start = launch.run(target, training, stop_timeout_s=10).commands
        assert "TPU free" in on_worker(free)
        assert "started" in on_worker(start)
        wait_for_training(count)
    assert "stopped" in on_worker(launch.stop(target, stop_timeout_s=10).commands[0])
    assert "no training process" in on_worker(launch.stop(target, 10).commands[0])
    assert log() == ["training", "saved", "training", "saved"]
