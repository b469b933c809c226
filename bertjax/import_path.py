"""Code from outside bertjax, named in a config by its import path "package.module:NAME":
a task (config.task) or a hook's factory (config.hooks). The module must be importable
(on PYTHONPATH, for example); a path that does not give what it must is one line."""

import importlib
from collections.abc import Callable
from typing import Any

from data_pipeline.errors import ConfigError


def load(path: str, *, where: str, what: str, accepts: Callable[[Any], bool]) -> Any:
    """What `path` names, if `accepts` it; else a ConfigError naming `where` (the config
    key) and `what` the path must name."""
    module_name, colon, name = path.partition(":")
    if not (module_name and colon and name):
        raise ConfigError(f"{where}={path!r}: must be an import path, package.module:NAME")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{where}={path!r}: cannot import {module_name}: {e}") from e
    found = getattr(module, name, None)
    if not accepts(found):
        raise ConfigError(f"{where}={path!r}: {module_name} has no {what} called {name!r}")
    return found
