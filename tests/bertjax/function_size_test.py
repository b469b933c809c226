"""The shape of the code: the train loop reads in one screen and takes its concerns as
hooks, not parameters, and no function runs on for pages."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("bertjax", "data_pipeline")
MAX_LINES = 80  # any function in the packages
MAX_TRAIN_LINES = 60  # any function in bertjax/train.py, the loop included
MAX_LOOP_PARAMETERS = 6


def _functions(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _lines(function) -> int:
    """From its first decorator (or its `def`) to its last line, docstring included."""
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    return function.end_lineno - first + 1


def _parameters(function) -> int:
    args = function.args
    named = args.posonlyargs + args.args + args.kwonlyargs
    return len(named) + (args.vararg is not None) + (args.kwarg is not None)


def test_the_train_loop_fits_a_screen_and_takes_few_parameters():
    (loop,) = [f for f in _functions(ROOT / "bertjax" / "train.py") if f.name == "_loop"]
    assert _lines(loop) <= MAX_TRAIN_LINES
    assert _parameters(loop) <= MAX_LOOP_PARAMETERS


def test_no_function_of_train_py_is_longer_than_the_loop_may_be():
    long = {
        f.name: _lines(f)
        for f in _functions(ROOT / "bertjax" / "train.py")
        if _lines(f) > MAX_TRAIN_LINES
    }
    assert not long


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_runs_on_for_pages(package):
    long = {
        f"{path.relative_to(ROOT)}:{f.lineno} {f.name}": _lines(f)
        for path in sorted((ROOT / package).rglob("*.py"))
        for f in _functions(path)
        if _lines(f) > MAX_LINES
    }
    assert not long, f"functions over {MAX_LINES} lines: split them"


def test_lines_and_parameters_are_counted_as_a_reader_sees_them():
    source = "@decorator\ndef f(a, /, b, *args, c, **kwargs):\n    '''Doc.'''\n    return a\n"
    (function,) = _functions_of(source)
    assert _lines(function) == 4
    assert _parameters(function) == 5


def _functions_of(source: str):
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
