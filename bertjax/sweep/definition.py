"""A sweep as `bertjax.sweep run` defines it: what its queue records (as JSON) and what its
workers and its report read back.

The JSON is a dict of these fields; `space` maps each key to {"choice": [values]} or
{"low": L, "high": H, "log": bool}.
"""

import copy
import dataclasses
import json

from bertjax.sweep import hyper


@dataclasses.dataclass(frozen=True)
class SweepDefinition:
    """A sweep: its config, the trials and space of its `get_hyper`, and how `run` runs them."""

    config: str  # the config file, as --config names it
    config_arg: str | None  # the argument after its colon (`glue.py:mrpc`), if any
    overrides: dict  # the sweep's own --config.KEY=VALUE, {key: value}
    trials: tuple[dict, ...]  # each trial's overrides, by index
    space: dict[str, hyper.Choice | hyper.Range]  # what a --search draws each key from
    search: str  # "tpe", "random", or "" to run the trials
    num_trials: int  # the trials a search draws; otherwise len(trials)
    metric: str  # --metric, or "" for the one each run's own "best" follows
    mode: str  # "max" or "min": the better side of the metric
    prune: bool
    max_retries: int  # attempts after a trial's first failure
    sweep_dir: str  # where the trials' workdirs are
    # The whole resolved config, so that a config file edited between two runs is noticed.
    config_values: dict
    # The module each trial runs (`python -m PROGRAM --config ... --workdir ...`): the
    # training entry point, or one that also predicts after it (bertjax.suites.glue.trial).
    program: str = "bertjax.main"

    @property
    def config_flag(self) -> str:
        """FILE[:ARG], as --config takes it."""
        return self.config + (f":{self.config_arg}" if self.config_arg is not None else "")

    def to_json(self) -> dict:
        """The definition as JSON values: what the study stores and gives back."""
        value = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        value["trials"] = list(self.trials)
        value["space"] = {key: _part_json(part) for key, part in self.space.items()}
        return json.loads(json.dumps(value))  # tuples become lists, as after a round trip

    @classmethod
    def from_json(cls, value: dict) -> "SweepDefinition":
        """The definition `to_json` gave; SweepError names a field unknown or missing."""
        if not isinstance(value, dict):
            raise hyper.SweepError(f"sweep definition: a {type(value).__name__}, not a dict")
        names = [field.name for field in dataclasses.fields(cls)]
        for name in value:
            if name not in names:
                raise hyper.SweepError(f"sweep definition: unknown field {name!r}")
        missing = [name for name in names if name not in value]
        if missing:
            raise hyper.SweepError(
                f"sweep definition: missing field {missing[0]!r} (recorded by an older "
                "bertjax); run the sweep again under another --study_name or --storage"
            )
        value = copy.deepcopy(value)
        value["trials"] = tuple(value["trials"])
        value["space"] = {key: _part(key, part) for key, part in value["space"].items()}
        return cls(**value)


def _part_json(part: hyper.Choice | hyper.Range) -> dict:
    if isinstance(part, hyper.Choice):
        return {"choice": list(part.values)}
    return {"low": part.low, "high": part.high, "log": part.log}


def _part(key: str, value: dict) -> hyper.Choice | hyper.Range:
    if isinstance(value, dict) and set(value) == {"choice"}:
        return hyper.Choice(tuple(value["choice"]))
    if isinstance(value, dict) and set(value) == {"low", "high", "log"}:
        return hyper.Range(value["low"], value["high"], value["log"])
    raise hyper.SweepError(
        f"sweep definition: space: {key}: {value!r} is neither "
        '{"choice": [...]} nor {"low": ..., "high": ..., "log": ...}'
    )
