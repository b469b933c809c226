"""data_pipeline.errors: the user's errors and a preemption, their exit codes, and a module
that imports nothing."""

import ast
import inspect
import os

import pytest

from data_pipeline import errors
from data_pipeline.errors import ConfigError
from data_pipeline.vocab import VocabError


def test_a_user_error_is_a_value_error_that_exits_with_the_usage_code_2():
    assert issubclass(errors.UserError, ValueError)
    assert errors.UserError.EXIT_CODE == 2
    with pytest.raises(ValueError, match="^config.data.x=1: must be 2$"):
        raise errors.UserError("config.data.x=1: must be 2")


def test_the_pipelines_own_errors_are_user_errors_and_keep_its_exit_code():
    for error in (ConfigError, VocabError):
        assert issubclass(error, errors.UserError)
        assert error.EXIT_CODE == 2
    with pytest.raises(errors.UserError) as caught:
        raise ConfigError("config.data.source='web': must be one of builtin, text")
    assert str(caught.value) == "config.data.source='web': must be one of builtin, text"


def test_preempted_is_no_error_and_exits_with_ex_tempfail_75():
    assert errors.Preempted.EXIT_CODE == 75 == os.EX_TEMPFAIL
    assert issubclass(errors.Preempted, Exception)
    # Not caught where user errors are: a stopped run is not bad input.
    assert not issubclass(errors.Preempted, ValueError)
    assert not issubclass(errors.Preempted, errors.UserError)
    assert errors.Preempted("stopped at step 7").EXIT_CODE == 75


def test_the_module_imports_nothing():
    tree = ast.parse(inspect.getsource(errors))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert imports == []
