"""Sweeps as an experiment config defines them: `get_hyper(hyper)` beside `get_config()`, as in
big_vision and scenic.

    def get_hyper(hyper):
        return hyper.product([
            hyper.sweep("config.optimizer.learning_rate", [5e-5, 4e-5, 3e-5, 2e-5]),
            hyper.sweep("config.num_train_epochs", [2.0, 3.0, 4.0]),
        ])

`hyper` is this module. A sweep is a list of trials, each setting config keys to values:
bool, int, float or str. A key is written `config.KEY`, KEY the dotted key of
`--config.KEY=VALUE`; the trials hold KEY, as a sweep directory records them (its trials'
names, its queue and its report). `sweep` gives one trial per value of a key, `fixed`
`length` trials of one value (one by default), `uniform` and `loguniform` `n` seeded
draws; `product` crosses a list of sweeps, `zipit` pairs them trial by trial (a one-trial
sweep pairs with every trial), `chainit` runs one after the other. `get_hyper` may also
return a list of dicts, {"config.KEY": value, ...} each. A config file with an argument
(`glue.py:mrpc`) may define `get_hyper(hyper, arg)`.

Every sweep also knows its search space, for `bertjax.sweep run --search tpe`:
each key's values become a categorical choice, and a `uniform` or
`loguniform` key the continuous range it draws from. A search treats the keys
as independent, so what `zipit` pairs is not kept.
"""

import dataclasses
import itertools
import math

import numpy as np

from data_pipeline.errors import UserError

Value = bool | int | float | str


class SweepError(UserError):
    """A sweep definition that cannot be run."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """A key that takes one of these values."""

    values: tuple[Value, ...]


@dataclasses.dataclass(frozen=True)
class Range:
    """A float key drawn from [low, high], on a log scale if `log`."""

    low: float
    high: float
    log: bool


@dataclasses.dataclass(frozen=True)
class Sweep:
    # KEY without "config.": what a sweep directory records and its trials are named by.
    trials: tuple[dict[str, Value], ...]
    space: dict[str, Choice | Range]

    def __len__(self) -> int:
        return len(self.trials)

    def __iter__(self):
        return iter(self.trials)


def sweep(name: str, values) -> Sweep:
    """One trial per value of `name` (config.KEY)."""
    key = _key(name)
    if isinstance(values, str | dict) or not hasattr(values, "__iter__"):
        raise SweepError(f"sweep({name!r}, {values!r}): the values are a list")
    values = tuple(values)
    if not values:
        raise SweepError(f"sweep({name!r}, ...): no values")
    for value in values:
        _check_value(name, value)
    return Sweep(tuple({key: value} for value in values), {key: Choice(_unique(values))})


def fixed(name: str, value: Value, length: int = 1) -> Sweep:
    """`length` trials of `name` (config.KEY) set to `value`."""
    key = _key(name)
    _check_value(name, value)
    if not (isinstance(length, int) and length >= 1):
        raise SweepError(f"fixed({name!r}, ..., length={length!r}): length is an integer >= 1")
    return Sweep(tuple({key: value} for _ in range(length)), {key: Choice((value,))})


def uniform(name: str, low: float, high: float, n: int, *, seed: int = 0) -> Sweep:
    """`n` values of `name` (config.KEY) drawn uniformly from [low, high] with `seed`."""
    return _draw(name, low, high, n, seed, log=False)


def loguniform(name: str, low: float, high: float, n: int, *, seed: int = 0) -> Sweep:
    """`n` values of `name` (config.KEY) drawn log-uniformly from [low, high] with `seed`
    (learning rates)."""
    return _draw(name, low, high, n, seed, log=True)


def product(sweeps) -> Sweep:
    """Every combination of a list of sweeps, the last varying fastest."""
    sweeps = _sweeps("product", sweeps)
    _check_disjoint("product", sweeps)
    trials = tuple(
        {k: v for part in parts for k, v in part.items()}
        for parts in itertools.product(*(s.trials for s in sweeps))
    )
    return Sweep(trials, {k: v for s in sweeps for k, v in s.space.items()})


def zipit(sweeps) -> Sweep:
    """Trial i of each sweep of a list together; all of one length, or one trial (repeated)."""
    sweeps = _sweeps("zipit", sweeps)
    _check_disjoint("zipit", sweeps)
    lengths = {len(s) for s in sweeps} - {1}
    if len(lengths) > 1:
        names = ["/".join(f"config.{key}" for key in s.space) for s in sweeps]
        described = ", ".join(f"{name}: {len(s)}" for name, s in zip(names, sweeps, strict=True))
        raise SweepError(f"zipit: the sweeps have different numbers of trials ({described})")
    length = lengths.pop() if lengths else 1
    trials = tuple(
        {k: v for s in sweeps for k, v in s.trials[i if len(s) > 1 else 0].items()}
        for i in range(length)
    )
    return Sweep(trials, {k: v for s in sweeps for k, v in s.space.items()})


def chainit(sweeps) -> Sweep:
    """The trials of each sweep of a list, one sweep after the other."""
    sweeps = _sweeps("chainit", sweeps)
    space: dict[str, Choice | Range] = {}
    for s in sweeps:
        for key, part in s.space.items():
            space[key] = part if key not in space else _union(space[key], part)
    return Sweep(tuple(t for s in sweeps for t in s.trials), space)


def as_sweep(value) -> Sweep:
    """What `get_hyper` returned, as a Sweep: a Sweep, or a list of dicts of config.KEY."""
    if isinstance(value, Sweep):
        return value
    if not isinstance(value, list | tuple) or not all(isinstance(t, dict) for t in value):
        raise SweepError("get_hyper must return hyper.product([...]) etc. or a list of dicts")
    trials = [product([fixed(name, v) for name, v in t.items()]) for t in value]
    return chainit(trials) if trials else Sweep((), {})


def _draw(name: str, low: float, high: float, n: int, seed: int, *, log: bool) -> Sweep:
    function = "loguniform" if log else "uniform"
    key = _key(name)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise SweepError(f"{function}({name!r}, {low}, {high}, ...): needs finite low < high")
    if log and low <= 0:
        raise SweepError(f"{function}({name!r}, {low}, {high}, ...): needs low > 0")
    if not (isinstance(n, int) and n >= 1):
        raise SweepError(f"{function}({name!r}, ..., n={n}): n must be an integer >= 1")
    rng = np.random.default_rng(seed)
    if log:
        draws = np.exp(rng.uniform(math.log(low), math.log(high), n))
    else:
        draws = rng.uniform(low, high, n)
    # Three significant digits: readable names and tables, and the same values everywhere.
    values = tuple(float(f"{x:.3g}") for x in draws)
    return Sweep(tuple({key: v} for v in values), {key: Range(float(low), float(high), log)})


def _sweeps(function: str, sweeps) -> list[Sweep]:
    if isinstance(sweeps, Sweep | str | dict) or not hasattr(sweeps, "__iter__"):
        raise SweepError(
            f"{function}: takes one list of sweeps, {function}([hyper.sweep(...), ...])"
        )
    sweeps = list(sweeps)
    for s in sweeps:
        if not isinstance(s, Sweep):
            raise SweepError(f"{function}: takes sweeps (hyper.sweep, hyper.fixed, ...), not {s!r}")
    return sweeps


def _check_disjoint(function: str, sweeps: list[Sweep]) -> None:
    seen = set()
    for s in sweeps:
        for key in s.space:
            if key in seen:
                raise SweepError(f"{function}: config.{key} is swept twice")
            seen.add(key)


def _union(a: Choice | Range, b: Choice | Range) -> Choice | Range:
    if isinstance(a, Range) and isinstance(b, Range) and a.log == b.log:
        return Range(min(a.low, b.low), max(a.high, b.high), a.log)
    if isinstance(a, Choice) and isinstance(b, Choice):
        return Choice(_unique(a.values + b.values))
    return a if isinstance(a, Range) else b  # a draw and fixed points: search the range


def _unique(values: tuple) -> tuple:
    out = []
    for v in values:
        if not any(type(v) is type(u) and v == u for u in out):
            out.append(v)
    return tuple(out)


def _key(name) -> str:
    """The key of the trials for `name`, config.KEY: KEY, as --config.KEY=VALUE names it."""
    if not isinstance(name, str) or not name.startswith("config."):
        to_write = f"; write config.{name}" if isinstance(name, str) and name else ""
        raise SweepError(
            f"{name!r}: a sweep key is written config.KEY, KEY as in --config.KEY=VALUE{to_write}"
        )
    key = name[len("config.") :]
    if any(not part for part in key.split(".")):
        raise SweepError(f"{name!r}: a sweep key is a dotted config key, e.g. config.optimizer.lr")
    return key


def _check_value(name: str, value) -> None:
    if not isinstance(value, Value):
        raise SweepError(f"{name}={value!r}: a swept value is a bool, int, float or str")
    if isinstance(value, float) and not math.isfinite(value):
        raise SweepError(f"{name}={value}: must be a finite number")
