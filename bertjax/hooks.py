"""The training loop's hooks: what runs after each step besides the step, and the rules
that keep a run of several hosts from hanging or losing its last checkpoint.

After every step, every host calls each hook, `hook.call(step, state)`, in one order.
Each hook states what it needs of the other hosts (`Hook`), and the loop refuses a
list that breaks a rule (`checked`), in one line, before the first step:

- A collective hook (an evaluation, a save, anything that gathers from every host)
  runs at the same steps on every host, or the hosts that enter it wait forever for
  one that does not. The loop calls every hook at every step, so the one way to skip
  a hook on one host is a hook before it that ends the run there alone. Hence:
- A hook that may stop the run (`stops`: it ends it by raising, after saving the
  step) is collective: it stops at a step every host agrees on. A hook that decides
  on one host asks instead, `session.stop.request(why)`, as a signal would; the stop
  check (Saver.stop_if_requested) and the save then save a step and stop: in a run
  of one host at once, on several at a step they agree on (preemption.StopRequests).
- The run has one save (`saves`), its last hook: the checkpoint of a step holds what
  the hooks before it recorded (an evaluation's best), and a hook after it could stop
  the run past it. So the stop check comes before the save, and a step it saves is
  not saved twice.

Hooks from outside train.py are made by factories, `factory(session) -> Hook` (the
session: train.Session, what the run holds), handed to
`train.train_and_evaluate(..., hooks=[factory])` or named in `config.hooks` by
their import path, "package.module:factory". They run after the loop's own hooks,
the evaluation included, and before the save.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from bertjax import import_path
from data_pipeline.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Hook:
    """A hook of the loop and what it needs of the other hosts (the module docstring's rules)."""

    # (step, state) after every step; the next step takes the state (donated): read it
    # there, keep nothing of it.
    call: Callable[[int, Any], None]
    # Every host calls it at the same steps: it runs collectives.
    collective: bool
    # It may end the run (raise) after saving the step: collective, so all hosts alike.
    stops: bool = False
    # The run's checkpoint save: one, the last hook.
    saves: bool = False

    @property
    def name(self) -> str:
        qualname = getattr(self.call, "__qualname__", None)
        return f"{self.call.__module__}.{qualname}" if qualname else repr(self.call)


def checked(*hooks: Hook) -> tuple[Hook, ...]:
    """`hooks` in the order given, unless they break a rule: then a ConfigError naming the
    hook."""
    for hook in hooks:
        if hook.stops and not hook.collective:
            raise ConfigError(
                f"hooks: {hook.name} may stop the run but is host-local: ending it on one host "
                "would skip the collective hooks after it there while the others wait in "
                "them; make it collective, or have it ask with session.stop.request(why)"
            )
    saves = [hook.name for hook in hooks if hook.saves]
    if len(saves) != 1:
        raise ConfigError(f"hooks: {len(saves)} saves ({', '.join(saves)}); a run has one")
    if not hooks[-1].saves:
        raise ConfigError(
            f"hooks: {hooks[-1].name} comes after the save ({saves[0]}); the save is the "
            "last hook, or a stop after it would end the run past the step's checkpoint"
        )
    return hooks


def from_config(paths: Sequence[str]) -> tuple[Callable, ...]:
    """The hook factories config.hooks names by their import paths."""
    if isinstance(paths, str):
        raise ConfigError(f"config.hooks={paths!r}: must be a list of import paths")
    return tuple(
        import_path.load(path, where=f"config.hooks[{i}]", what="hook factory", accepts=callable)
        for i, path in enumerate(paths)
    )


def made(factories: Sequence[Callable], session) -> list[Hook]:
    """The hooks `factories` make for `session`; a factory that makes no Hook is an error
    naming it."""
    hooks = []
    for factory in factories:
        hook = factory(session)
        if not isinstance(hook, Hook):
            name = f"{factory.__module__}:{getattr(factory, '__qualname__', factory)}"
            raise ConfigError(f"hooks: {name} made {hook!r}, not a bertjax.hooks.Hook")
        hooks.append(hook)
    return hooks
