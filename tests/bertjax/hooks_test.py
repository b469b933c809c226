"""bertjax.hooks: the rules between the loop's hooks, hooks named in config.hooks, and a
hook's stop request, in this process and as a user meets them (python -m bertjax.main)."""

import os
import re
import subprocess

import pytest
from faults_test import PREEMPTED, command, last_line
from support import REPO, run_hooks

from bertjax import checkpoint, hooks, preemption, tasks
from bertjax.hooks import Hook
from data_pipeline.errors import ConfigError
from experiments.pretrain import tiny_cpu


def step(step, state):
    del step, state


def save(step, state):
    del step, state


def test_a_list_with_its_stops_collective_and_one_save_last_is_kept_in_order():
    listed = (
        Hook(step, collective=False),
        Hook(step, collective=True, stops=True),
        Hook(step, collective=True),
        Hook(save, collective=True, stops=True, saves=True),
    )
    assert hooks.checked(*listed) == listed


@pytest.mark.parametrize(
    "listed, refused",
    [
        # A stop on one host alone would leave the others in the save's collectives.
        (
            [Hook(step, collective=False, stops=True), Hook(save, collective=True, saves=True)],
            "hooks: hooks_test.step may stop the run but is host-local: ending it on one host "
            "would skip the collective hooks after it there",
        ),
        (
            [Hook(save, collective=True, saves=True), Hook(step, collective=True, stops=True)],
            "hooks: hooks_test.step comes after the save (hooks_test.save); the save is the "
            "last hook",
        ),
        (
            [Hook(save, collective=True, saves=True), Hook(save, collective=True, saves=True)],
            "hooks: 2 saves (hooks_test.save, hooks_test.save); a run has one",
        ),
        ([Hook(step, collective=False)], "hooks: 0 saves (); a run has one"),
    ],
)
def test_a_list_that_breaks_a_rule_is_refused_in_one_line(listed, refused):
    with pytest.raises(ConfigError) as error:
        hooks.checked(*listed)
    assert str(error.value).startswith(refused)
    assert "\n" not in str(error.value)


def test_a_factory_that_makes_no_hook_is_named():
    def unfinished(session):
        del session

    with pytest.raises(ConfigError, match=r"^hooks: hooks_test:.*unfinished made None, not a"):
        hooks.made([unfinished], session=None)


def test_config_hooks_name_factories_by_their_import_paths():
    paths = ("support.run_hooks:gather_steps", "support.run_hooks:ask_to_stop")
    assert hooks.from_config(paths) == (run_hooks.gather_steps, run_hooks.ask_to_stop)
    assert hooks.from_config(()) == ()


@pytest.mark.parametrize(
    "paths, refused",
    [
        (("no_such_module:make",), "config.hooks[0]='no_such_module:make': cannot import"),
        (
            ("support.run_hooks:gather_steps", "support.run_hooks:STOP_ASKED_AT"),
            "config.hooks[1]='support.run_hooks:STOP_ASKED_AT': support.run_hooks has no hook "
            "factory called 'STOP_ASKED_AT'",
        ),
        (("support.run_hooks",), "config.hooks[0]='support.run_hooks': must be an import path"),
    ],
)
def test_a_config_hook_that_names_no_factory_is_refused_with_the_checks_of_the_config(
    paths, refused
):
    config = tiny_cpu.get_config()
    config.hooks = paths
    # The task's check: a sweep checks its trials with it before any starts, a run
    # before it reads its data.
    with pytest.raises(ConfigError, match="^" + re.escape(refused)):
        tasks.for_config(config).check_config(config)


def test_config_hooks_is_a_list():
    with pytest.raises(ConfigError, match="^config.hooks='a.b:c': must be a list of import"):
        hooks.from_config("a.b:c")


def test_a_hook_asks_the_run_to_stop_as_a_signal_would():
    stop = preemption.StopRequests()
    assert not stop.requested(3) and not stop.pending
    stop.request("the loss went flat")
    assert stop.requested(3) and stop.pending
    stop.request("another reason")
    assert stop.signal_name == "the loss went flat"  # the first request is the one acted on


@pytest.mark.integration
def test_a_hook_named_on_the_command_line_stops_the_run_with_its_checkpoint(
    tmp_path, small_vocab_file
):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}

    def run(workdir, *overrides):
        result = subprocess.run(
            command(workdir, small_vocab_file, "--config.num_train_steps=6", *overrides),
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return result.returncode, result.stderr

    workdir = tmp_path / "typo"
    code, stderr = run(workdir, "--config.hooks=support.run_hook:ask_to_stop")
    assert code == 2, stderr[-3000:]
    assert last_line(stderr).startswith(
        "error: config.hooks[0]='support.run_hook:ask_to_stop': cannot import support.run_hook"
    )
    assert "Traceback" not in stderr
    assert not (workdir / "config.json").exists()  # refused before the run began

    workdir = tmp_path / "stopped"
    code, stderr = run(workdir, "--config.hooks=support.run_hooks:ask_to_stop")
    assert code == PREEMPTED, stderr[-3000:]
    assert last_line(stderr).startswith(
        "stopped: ask_to_stop on process 0 at step 2: checkpoint 2 saved in "
    )
    assert checkpoint.latest_step(str(workdir)) == 2
