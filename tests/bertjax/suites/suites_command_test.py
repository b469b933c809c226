"""bertjax.suites' command line without running a suite: --tasks, --versions and
--learning_rates parsed and refused in one line, the suite's trials in their order, and
the suite's default --config added to `run` alone."""

import os

import pytest
from support import REPO

from bertjax.suites import command
from bertjax.suites.glue.suite import GLUE, TASKS
from bertjax.suites.squad import SQUAD
from bertjax.sweep import hyper
from data_pipeline import config as data_config
from data_pipeline.errors import UserError


def test_tasks_are_lowercased_stripped_and_kept_in_order():
    assert command.parse_parts(GLUE, ["RTE", " mrpc ", "", "MNLI"]) == ("rte", "mrpc", "mnli")
    assert command.parse_parts(GLUE, list(TASKS)) == TASKS


@pytest.mark.parametrize(
    "names, message",
    [
        (["rte", "squad"], r"^--tasks: unknown task 'squad'; the tasks: cola,sst2,mrpc,.*,wnli$"),
        (["ax"], r"^--tasks: unknown task 'ax'"),
        ([], r"^--tasks: name one or more tasks$"),
        (["", " "], r"^--tasks: name one or more tasks$"),
        (["rte", "cola", "RTE"], r"^--tasks: a task is named twice: rte,cola,rte$"),
    ],
    ids=["unknown", "ax", "none", "blank", "twice"],
)
def test_bad_tasks_are_one_line_errors(names, message):
    with pytest.raises(command.SuiteError, match=message) as error:
        command.parse_parts(GLUE, names)
    assert "\n" not in str(error.value)
    assert isinstance(error.value, UserError)


@pytest.mark.parametrize(
    "names, message",
    [
        (["v3"], r"^--versions: unknown version 'v3'; the versions: v1.1,v2.0$"),
        ([" "], r"^--versions: name one or more versions$"),
        (["v1.1", "V1.1"], r"^--versions: a version is named twice: v1.1,v1.1$"),
    ],
)
def test_bad_versions_are_one_line(names, message):
    with pytest.raises(command.SuiteError, match=message):
        command.parse_parts(SQUAD, names)


def test_learning_rates_are_parsed_in_order():
    assert command.parse_learning_rates(["5e-5", "0.00002", " 3e-5"]) == (5e-5, 2e-5, 3e-5)
    assert command.parse_learning_rates(GLUE.learning_rates) == (
        5e-5, 4e-5, 3e-5, 2e-5,
    )  # fmt: skip


@pytest.mark.parametrize(
    "values, message",
    [
        (["5e-5", "fast"], r"^--learning_rates: 'fast' is not a number$"),
        (["0"], r"^--learning_rates: 0 is not a positive learning rate$"),
        (["-2e-5"], r"^--learning_rates: -2e-5 is not a positive learning rate$"),
        (["inf"], r"^--learning_rates: inf is not a positive learning rate$"),
        (["nan"], r"^--learning_rates: nan is not a positive learning rate$"),
        ([], r"^--learning_rates: name one or more$"),
    ],
    ids=["word", "zero", "negative", "inf", "nan", "none"],
)
def test_bad_learning_rates_are_one_line_errors(values, message):
    with pytest.raises(command.SuiteError, match=message) as error:
        command.parse_learning_rates(values)
    assert "\n" not in str(error.value)


def test_the_suite_runs_each_task_then_rate_then_seed():
    sweep = command.suite_sweep(GLUE.part_trials(("rte", "mrpc"), "tfds"), (3e-5, 2e-5), 2)
    assert [tuple(t.values()) for t in sweep.trials] == [
        ("rte", 3e-5, 0), ("rte", 3e-5, 1), ("rte", 2e-5, 0), ("rte", 2e-5, 1),
        ("mrpc", 3e-5, 0), ("mrpc", 3e-5, 1), ("mrpc", 2e-5, 0), ("mrpc", 2e-5, 1),
    ]  # fmt: skip
    assert all(list(t) == ["data.glue_task", "optimizer.learning_rate", "seed"] for t in sweep)
    assert sweep.space == {
        "data.glue_task": hyper.Choice(("rte", "mrpc")),
        "optimizer.learning_rate": hyper.Choice((3e-5, 2e-5)),
        "seed": hyper.Choice((0, 1)),
    }


def test_one_seed_is_seed_zero():
    sweep = command.suite_sweep(GLUE.part_trials(("cola",), "tfds"), (5e-5, 4e-5, 3e-5), 1)
    assert sweep.trials == tuple(
        {"data.glue_task": "cola", "optimizer.learning_rate": rate, "seed": 0}
        for rate in (5e-5, 4e-5, 3e-5)
    )


@pytest.mark.parametrize("seeds", [0, -1])
def test_fewer_than_one_seed_is_refused(seeds):
    with pytest.raises(command.SuiteError, match=rf"^--seeds={seeds}: must be at least 1$"):
        command.suite_sweep(GLUE.part_trials(("rte",), "tfds"), (2e-5,), seeds)


@pytest.mark.parametrize("kind", [GLUE, SQUAD], ids=["glue", "squad"])
def test_run_without_a_config_gets_the_suites_config_first(monkeypatch, kind):
    monkeypatch.chdir(REPO)
    argv = ["suites", kind.name, "run", "--init_checkpoint=w", "--config.seed=3", "--data_dir=d"]
    assert command.with_default_config(argv) == ["suites", f"--config={kind.config}", *argv[1:]]
    assert os.path.isfile(kind.config)


@pytest.mark.parametrize(
    "config_file, task, suites",
    [
        ("finetune/glue.py", None, {"glue"}),
        ("finetune/squad.py", None, {"squad"}),
        ("finetune/classify.py", None, set()),  # classification, not on GLUE's data
        ("finetune/glue.py", "tagging", set()),
        ("finetune/squad.py", "bertjax.tasks.tagging:TASK", set()),
        ("pretrain/tiny_cpu.py", None, set()),  # no config.task: pretraining
    ],
    ids=["glue", "squad", "classify", "glue-tagging", "squad-tagging-path", "pretraining"],
)
def test_a_suite_knows_its_configs_by_the_task_they_train(config_file, task, suites):
    config = data_config.read_config_file(str(REPO / "experiments" / config_file))
    if task is not None:
        config.task = task
    assert {kind.name for kind in (GLUE, SQUAD) if kind.is_config(config)} == suites


def test_a_config_of_an_unknown_task_is_one_line():
    config = data_config.read_config_file(str(REPO / "experiments" / "finetune" / "squad.py"))
    config.task = "qa"
    with pytest.raises(UserError, match=r"^config.task='qa': must be one of pretraining,"):
        SQUAD.is_config(config)


def test_run_from_outside_the_checkout_gets_the_configs_absolute_path(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    program, flag, *rest = command.with_default_config(["suites", "glue", "run", "--out=o"])
    assert (program, rest) == ("suites", ["glue", "run", "--out=o"])
    path = flag.removeprefix("--config=")
    assert os.path.isabs(path)
    assert os.path.samefile(path, REPO / GLUE.config)


@pytest.mark.parametrize(
    "argv",
    [
        ["suites", "glue", "run", "--config=mine.py", "--out=o"],
        ["suites", "squad", "run", "--out=o", "--config", "mine.py"],
        ["suites", "glue", "run", "-config=mine.py:arg"],
        ["suites", "glue", "report", "out"],
        ["suites", "glue", "submit", "out"],
        ["suites", "run", "--out=o"],
        ["suites", "nosuch", "run"],
        ["suites"],
        ["suites", "--help"],
    ],
    ids=["config", "config-apart", "single-dash", "report", "submit", "no-suite", "unknown",
         "nothing", "help"],
)  # fmt: skip
def test_argv_is_kept_otherwise(argv):
    assert command.with_default_config(list(argv)) == argv
