"""bertjax.sweep.definition: the sweep that `run` records, as JSON and back."""

import copy
import json

import pytest
from support.sweeps import make_definition, make_study

from bertjax.sweep import hyper, trial_queue
from bertjax.sweep.definition import SweepDefinition


def test_a_definition_goes_through_json_and_back_unchanged(tmp_path):
    definition = make_definition(
        tmp_path,
        config_arg="mrpc",
        overrides={"num_train_epochs": 2.0},
        space={
            "seed": hyper.Choice((0, 1)),
            "optimizer.learning_rate": hyper.Range(1e-5, 1e-3, True),
        },
        search="tpe",
        num_trials=4,
        config_values={"seed": 0, "optimizer": {"learning_rate": 3e-5}},
    )
    stored = json.loads(json.dumps(definition.to_json()))  # as the study keeps it
    assert stored["space"]["seed"] == {"choice": [0, 1]}
    assert SweepDefinition.from_json(stored) == definition
    study, recorded = make_study(tmp_path)
    assert trial_queue.recorded_sweep(study) == recorded
    assert (
        trial_queue.load(trial_queue.storage_url(str(tmp_path), ""), "sweep", heartbeat_s=30)[1]
        == recorded
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: {**d, "colour": "blue"}, "sweep definition: unknown field 'colour'"),
        (lambda d: {k: v for k, v in d.items() if k != "mode"}, "missing field 'mode'"),
        (lambda d: {**d, "space": {"seed": {"values": [0]}}}, r"space: seed: .* is neither"),
    ],
)
def test_a_definition_with_a_field_unknown_or_missing_is_refused(tmp_path, change, message):
    stored = change(make_definition(tmp_path).to_json())
    with pytest.raises(hyper.SweepError, match=message):
        SweepDefinition.from_json(stored)
    # A study another tool made: the one-line error names the sweep and the field.
    study, _ = make_study(tmp_path)
    study.set_user_attr(trial_queue.SWEEP_ATTR, stored)
    with pytest.raises(trial_queue.QueueError, match=f"^sweep 'sweep': .*{message}"):
        trial_queue.load(trial_queue.storage_url(str(tmp_path), ""), "sweep", heartbeat_s=30)


def test_the_config_flag_is_the_file_and_its_argument_after_a_colon():
    assert make_definition("d", config="glue.py", config_arg="mrpc").config_flag == "glue.py:mrpc"
    assert make_definition("d", config="glue.py").config_flag == "glue.py"
    assert make_definition("d", config="glue.py", config_arg="").config_flag == "glue.py:"


def test_the_json_is_plain_lists_and_dicts_as_the_database_gives_them_back():
    definition = make_definition(
        "d",
        trials=({"seed": 0}, {"seed": 1}),
        space={"lr": hyper.Range(1e-5, 1e-3, True), "act": hyper.Choice(("gelu", "relu"))},
    )
    stored = definition.to_json()
    assert stored == json.loads(json.dumps(stored))
    assert stored["trials"] == [{"seed": 0}, {"seed": 1}]
    assert stored["space"] == {
        "lr": {"low": 1e-5, "high": 1e-3, "log": True},
        "act": {"choice": ["gelu", "relu"]},
    }
    kept = copy.deepcopy(stored)
    assert SweepDefinition.from_json(stored).trials == ({"seed": 0}, {"seed": 1})
    assert stored == kept  # reading it changes nothing the caller holds


@pytest.mark.parametrize("value", [[], "sweep", None])
def test_a_definition_that_is_not_a_dict_is_refused(value):
    kind = type(value).__name__
    with pytest.raises(hyper.SweepError, match=f"^sweep definition: a {kind}, not a dict$"):
        SweepDefinition.from_json(value)


def test_a_sweep_recorded_before_a_field_existed_is_refused_in_one_line(tmp_path):
    stored = make_definition(tmp_path).to_json()
    del stored["program"]  # as sweeps recorded before the field existed
    with pytest.raises(hyper.SweepError) as caught:
        SweepDefinition.from_json(stored)
    assert str(caught.value) == (
        "sweep definition: missing field 'program' (recorded by an older bertjax); run the "
        "sweep again under another --study_name or --storage"
    )
    glue = make_definition(tmp_path, program="bertjax.suites.glue.trial")
    assert SweepDefinition.from_json(glue.to_json()).program == "bertjax.suites.glue.trial"
