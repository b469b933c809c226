"""data_pipeline.cli: flags defined only when a tool runs; user errors, unknown config keys
included, in one line with exit status 2; every program the docs name answers --help at once
and quietly."""

import ast
import concurrent.futures
import importlib
import inspect
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest
from absl import flags
from ml_collections import config_flags
from support import REPO, programs

from data_pipeline import cli
from data_pipeline.config import check_known_keys, key_paths
from data_pipeline.errors import ConfigError

TINY = "experiments/pretrain/tiny_cpu.py"
# Every program README.md and docs/ tell a user to run (support/programs.py).
PROGRAMS = sorted(programs.programs())
# What TensorFlow and XLA print from C++ while they load, whatever TF_CPP_MIN_LOG_LEVEL says.
_NATIVE_LOG = re.compile(r"^(WARNING: All log messages before absl::InitializeLog|[IWE]\d{4} )")


def run_python(*args, timeout=300):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def stderr_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if not _NATIVE_LOG.match(line)]


def module_file(module: str) -> pathlib.Path:
    """The file `python -m MODULE` runs: MODULE.py, or a package's __main__.py."""
    path = REPO.joinpath(*module.split("."))
    return path / "__main__.py" if path.is_dir() else path.with_suffix(".py")


def imported_as(source: str, name: str) -> str:
    """The module that `source` imports as `name` (`from bertjax import main as main_lib`)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return f"{node.module}.{alias.name}"
    raise AssertionError(f"no module imported as {name}")


_RUN = re.compile(
    r"\b(?P<runner>program|cli)\.run\(\s*"
    r"(?:\"(?P<work>[\w.]+):(?P<function>\w+)\"|(?:(?P<main_from>\w+)\.)?main), "
    r"(?:(?P<flags_from>\w+)\.)?define_flags\b"
)


def run_line(program: str) -> tuple[str, re.Match]:
    source = module_file(program).read_text(encoding="utf-8")
    [run] = _RUN.finditer(source)
    return source, run


def flags_module(program: str) -> str:
    """The module whose define_flags() the program runs with: its own, its package's command
    (python -m bertjax.sweep: bertjax.sweep.command) or another program's."""
    source, run = run_line(program)
    return imported_as(source, run["flags_from"]) if run["flags_from"] else program


@pytest.mark.integration
def test_importing_every_tool_in_one_process_defines_no_flag():
    script = textwrap.dedent(
        f"""
        import importlib
        from absl import flags
        for name in {sorted({*PROGRAMS, *map(flags_module, PROGRAMS)})!r}:
            importlib.import_module(name)
        ours = {{
            module: sorted(f.name for f in defined)
            for module, defined in flags.FLAGS.flags_by_module_dict().items()
            if module.split(".")[0] in ("bertjax", "data_pipeline", "experiments")
        }}
        print(ours)
        """
    )
    result = run_python("-c", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{}"


def test_the_docs_name_every_program():
    # A program they do not name would escape the checks below. A program is a module run
    # as __main__ (a package's __main__.py, or under `if __name__ == "__main__":`) that starts
    # through program.run or cli.run.
    found = set()
    for path in [p for package in programs.PACKAGES for p in (REPO / package).rglob("*.py")]:
        source = path.read_text(encoding="utf-8")
        if ".run(" not in source:
            continue
        tree = ast.parse(source)
        runs = any(
            isinstance(node, ast.Call) and ast.unparse(node.func) in ("program.run", "cli.run")
            for node in ast.walk(tree)
        )
        as_main = path.name == "__main__.py" or any(
            isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
            for node in tree.body
        )
        if runs and as_main:
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found.add(module.removesuffix(".__main__"))
    assert found == set(PROGRAMS)


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_tool_follows_the_convention(name):
    # The program's module holds its usage and its run line; the flags are its own or those
    # of the module the run line names (a package's command, another program's). The module
    # doing the work is named by the run line and imported once the flags are parsed, unless
    # the work is light.
    source, run = run_line(name)
    flags_source = module_file(flags_module(name)).read_text(encoding="utf-8")
    assert "def define_flags() -> None:" in flags_source
    # bertjax's programs start through bertjax/program.py, which also sets libtpu's environment.
    assert run["runner"] == ("program" if name.startswith("bertjax.") else "cli")
    if run["work"]:
        work = importlib.import_module(run["work"])
        assert list(inspect.signature(getattr(work, run["function"])).parameters) == ["args"]
    else:
        main_from = imported_as(source, run["main_from"]) if run["main_from"] else name
        main_source = module_file(main_from).read_text(encoding="utf-8")
        assert re.search(r"^def main\(argv", main_source, re.M)
    assert "app.run(" not in source and "USER_ERRORS" not in source


# --------------------------------------------------------------------------- unknown keys


@pytest.mark.integration
@pytest.mark.parametrize(
    "override,message",
    [
        (
            "--config.lerning_rate=1",
            "unknown config key: config.lerning_rate; did you mean config.optimizer.learning_rate?",
        ),
        (
            "--config.optimizer.lerning_rate=1",
            "unknown config key: config.optimizer.lerning_rate; "
            "did you mean config.optimizer.learning_rate?",
        ),
        (
            "--config.data.max_seq_lenght=3",
            "unknown config key: config.data.max_seq_lenght; "
            "did you mean config.data.max_seq_length?",
        ),
    ],
    ids=["top-level", "depth-2-optimizer", "depth-2-data"],
)
def test_trainer_names_an_unknown_override_before_training(tmp_path, override, message):
    workdir = tmp_path / "workdir"
    result = run_python(
        "-m", "bertjax.main", "--config", TINY, "--workdir", str(workdir), override, timeout=120
    )
    assert stderr_lines(result) == [f"error: {message}"], result.stderr
    assert result.returncode == 2
    assert result.stdout == ""
    assert not workdir.exists()


@pytest.mark.integration
def test_data_tool_names_an_unknown_override():
    result = run_python(
        "-m",
        "data_pipeline.inspect_batches",
        "--config",
        TINY,
        "--config.data.vocab_sise=5",
        timeout=120,
    )
    assert stderr_lines(result) == [
        "error: unknown config key: config.data.vocab_sise; did you mean config.data.vocab_size?"
    ], result.stderr
    assert result.returncode == 2


@pytest.mark.integration
def test_unknown_key_in_a_config_file(tmp_path):
    config_file = tmp_path / "typo.py"
    config_file.write_text(
        textwrap.dedent(
            """
            from experiments.pretrain import tiny_cpu


            def get_config():
                config = tiny_cpu.get_config()
                config.data.max_seq_lenght = 3
                return config
            """
        )
    )
    result = run_python(
        "-m", "data_pipeline.build_vocab", "--config", str(config_file), "--output", "unused.txt"
    )
    assert stderr_lines(result) == [
        "error: unknown config key: config.data.max_seq_lenght; "
        "did you mean config.data.max_seq_length?"
    ], result.stderr
    assert result.returncode == 2


@pytest.mark.integration
def test_missing_config_file_is_one_line():
    result = run_python("-m", "data_pipeline.inspect_batches", "--config", "experiments/no_such.py")
    assert stderr_lines(result) == ["error: --config=experiments/no_such.py: no such file"]
    assert result.returncode == 2


@pytest.mark.integration
def test_config_file_rejecting_its_argument_is_one_line(tmp_path):
    # glue.py's get_config raises a ConfigError (a UserError) for an unknown task;
    # ml_collections and absl would wrap it in a multi-line "FATAL Flags parsing error".
    workdir = tmp_path / "workdir"
    result = run_python(
        "-m",
        "bertjax.main",
        "--config",
        "experiments/finetune/glue.py:nosuch",
        "--workdir",
        str(workdir),
        timeout=120,
    )
    assert stderr_lines(result) == [
        "error: glue.py:nosuch: the task must be one of "
        "cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli"
    ], result.stderr
    assert result.returncode == 2
    assert result.stdout == ""
    assert not workdir.exists()


# --------------------------------------------------------------------------- in process


@pytest.fixture
def config_flag_values():
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=flag_values)
    return flag_values


@pytest.mark.parametrize(
    "override,match",
    [
        (
            "--config.num_train_step=3",
            r"config\.num_train_step; did you mean config\.num_train_steps\?",
        ),
        ("--config.data.max_seq_lenght=3", r"did you mean config\.data\.max_seq_length\?"),
        ("--noconfig.data.whole_word_mask_x", r"did you mean config\.data\.whole_word_mask\?"),
        ("--config.warmup_steps=3", r"did you mean config\.optimizer\.warmup_steps\?"),
        ("--config.seed.x=3", r"config\.seed\.x; config\.seed is a value, not a group of keys"),
        ("--config.zzzz=3", r"config\.zzzz; known keys: checkpoint_every_steps, "),
    ],
)
def test_check_config_overrides(config_flag_values, override, match):
    argv = ["prog", "--config", TINY, "--config.seed=1", override]
    with pytest.raises(ConfigError, match=match):
        cli.check_config_overrides(argv, config_flag_values)


def test_check_config_overrides_passes_known_keys(config_flag_values):
    argv = ["prog", f"--config={TINY}", "--config.optimizer.learning_rate=1", "--config.seed", "2"]
    cli.check_config_overrides(argv, config_flag_values)


def test_check_known_keys():
    check_known_keys(["a", "b"], ["a", "b", "c"], "config")
    with pytest.raises(ConfigError, match=r"^unknown config key: config\.x\.bb; did you mean"):
        check_known_keys(["bb"], ["b", "bbb"], "config.x")
    with pytest.raises(
        ConfigError, match=r"config\.q; known keys: a, b \(also unknown: config\.r\)"
    ):
        check_known_keys(["a", "q", "r"], ["b", "a"], "config")
    # A key at the wrong depth: the one elsewhere is suggested, never the key itself.
    config = {"lerning_rate": 1, "optimizer": {"learning_rate": 2}}
    with pytest.raises(ConfigError, match=r"did you mean config\.optimizer\.learning_rate\?"):
        check_known_keys(config, ["optimizer"], "config", elsewhere=key_paths(config, "config"))
    assert key_paths(config, "config") == [
        "config.lerning_rate",
        "config.optimizer",
        "config.optimizer.learning_rate",
    ]


@pytest.mark.integration
@pytest.mark.parametrize(
    "command, module",
    [("bertjax.sweep", "command"), ("bertjax.convert", "command"), ("bertjax.suites", "command")],
)
def test_a_package_command_helps_with_its_module_usage(command, module):
    # absl prints the __main__ module's docstring; a package's __main__.py lends its command's.
    source = (REPO / command.replace(".", "/") / f"{module}.py").read_text(encoding="utf-8")
    first_line = source.split('"""', 1)[1].lstrip("\\").splitlines()[0]
    result = run_python("-m", command, "--help")
    assert first_line in result.stdout, result.stdout[:500]


# What a tool imports before it answers: TensorFlow and JAX take seconds of CPU to import
# (and log to stderr), so `--help` and the errors found in the flags come before them.
HEAVY = ("tensorflow", "jax", "flax", "optax", "orbax")
_REPORT_IMPORTS = textwrap.dedent(
    """
    import atexit, runpy, sys
    atexit.register(lambda: print("imported:", *[m for m in {heavy!r} if m in sys.modules],
                                  file=sys.stderr))
    sys.argv = [{command!r}, *{args!r}]
    runpy.run_module({command!r}, run_name="__main__", alter_sys=True)
    """
)


def heavy_imports(command: str, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Runs `python -m COMMAND ARGS`; returns the result and the heavy modules it imported."""
    script = _REPORT_IMPORTS.format(heavy=HEAVY, command=command, args=list(args))
    result = run_python("-c", script, timeout=120)
    [line] = [x for x in result.stderr.splitlines() if x.startswith("imported:")]
    return result, line.split()[1:]


# The CPU time `--help` may take, in the program's own process. Python, absl, ml_collections
# and a program's light modules take 0.1 to 0.3 s on the 2-core machine, bertjax.sweep and
# bertjax.suites (Optuna, SQLAlchemy) 0.7 to 0.9 s; importing TensorFlow takes about 4 s more.
# CPU time, not wall time: the suite's other workers on the same cores stretch a program's wall
# time, hardly its CPU time, so the bound leaves the slowest program 70% more than it takes
# even under load, and on a quiet machine it means an answer in well under 2 s. Importing JAX
# alone (0.7 s) could pass under it, so the heavy modules imported are checked as well.
HELP_CPU_LIMIT_S = 1.5


def help_problems(argv: tuple[str, ...]) -> str | None:
    """What is wrong with `python -m ARGV --help` as a user runs it, or None: its exit status,
    its stderr, the heavy modules it imports (-X importtime lists them), its CPU time."""
    # No TF_CPP_MIN_LOG_LEVEL, as in a user's shell: TensorFlow's start-up lines show.
    env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    command = [sys.executable, "-X", "importtime", "-m", *argv, "--help"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
        timer = threading.Timer(120, child.kill)
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)  # the child's CPU time, whatever runs beside
        timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode().splitlines()
    imports = [line.rsplit("|", 1)[1].strip() for line in stderr if line.startswith("import time:")]
    heavy = sorted({name.split(".")[0] for name in imports} & set(HEAVY))
    noise = [line for line in stderr if not line.startswith("import time:")]
    cpu_s = usage.ru_utime + usage.ru_stime
    problems = []
    if child.returncode != 0 or "--" not in stdout:
        problems.append(f"exit status {child.returncode}, {len(stdout)} characters of help")
    if noise:
        problems.append(f"{len(noise)} line(s) on stderr, the first: {noise[0]}")
    if heavy:
        problems.append(f"imports {', '.join(heavy)}")
    if cpu_s > HELP_CPU_LIMIT_S:
        problems.append(f"{cpu_s:.1f} s of CPU, more than {HELP_CPU_LIMIT_S} s")
    return f"python -m {' '.join(argv)} --help: {'; '.join(problems)}" if problems else None


@pytest.mark.command
def test_every_program_the_docs_name_answers_help_quickly_and_quietly():
    # Each program, and each with the subcommands the docs give it (bertjax.suites glue run),
    # two at a time: about 50 answers of a fraction of a second each.
    calls = [
        (program, *words)
        for program, subcommands in programs.programs().items()
        for words in [(), *sorted(subcommands)]
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        problems = [problem for problem in pool.map(help_problems, calls) if problem]
    assert not problems, "\n".join(problems)


def test_every_experiment_config_loads_without_tensorflow_or_jax():
    # A program reads its config file while it parses its flags: whatever the file imports
    # comes before a wrong key can be named (the fine-tuning configs once imported
    # TensorFlow through their tasks' input modules: 10 s for a one-line error).
    script = textwrap.dedent(
        f"""
        import glob, sys
        from data_pipeline import config
        paths = sorted(set(glob.glob("experiments/*/*.py")) - set(glob.glob("experiments/*/_*")))
        for path in paths:
            config.read_config_file(path)
        print(len(paths), *[m for m in {HEAVY!r} if m in sys.modules])
        """
    )
    result = run_python("-c", script, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    count, *imported = result.stdout.split()
    assert int(count) >= 20 and imported == []


@pytest.mark.integration
def test_a_bad_config_key_is_named_before_tensorflow_and_jax_start(tmp_path):
    args = ("--config", TINY, "--workdir", str(tmp_path / "w"), "--config.lerning_rate=1")
    result, imported = heavy_imports("bertjax.main", *args)
    assert result.returncode == 2 and "did you mean config.optimizer" in result.stderr
    assert imported == []


@pytest.mark.integration
@pytest.mark.parametrize(
    "args,message",
    [
        (["--config", TINY], "flag --workdir=None: Flag --workdir must have a value"),
        (["--workdir=w", "--config", TINY, "--config.num_train_steps=abc"], "invalid literal"),
        (["--nosuch"], "Unknown command line flag 'nosuch'"),
        (["--workdir=w", "--config", TINY, "extra"], "unexpected arguments: extra"),
    ],
    ids=["missing-flag", "wrong-type", "unknown-flag", "positional"],
)
def test_a_flag_error_is_one_line_with_exit_status_2(args, message):
    result, imported = heavy_imports("bertjax.main", *args)
    errors = [line for line in stderr_lines(result) if not line.startswith("imported:")]
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], errors
    assert result.returncode == 2 and imported == []


@pytest.mark.integration
def test_ctrl_c_ends_a_tool_in_one_line_with_exit_status_130():
    # A Ctrl-C that reaches a tool's main ends it, as the shell would have it, without
    # a traceback; a tool that knows more says what it kept (Interrupted's message).
    tool = textwrap.dedent(
        """
        import sys
        from absl import flags
        from data_pipeline import cli
        from data_pipeline.errors import Interrupted

        def main(argv):
            if sys.argv[-1] == "--kept":
                raise Interrupted("a second Ctrl-C stopped it; nothing was written")
            raise KeyboardInterrupt

        cli.run(main, lambda: flags.DEFINE_bool("kept", False, "say what was kept"))
        """
    )
    for args, line in (
        ((), "interrupted: Ctrl-C"),
        (("--kept",), "interrupted: a second Ctrl-C stopped it; nothing was written"),
    ):
        result = run_python("-c", tool, *args)
        assert result.returncode == 130, result.stderr
        assert stderr_lines(result) == [line]
