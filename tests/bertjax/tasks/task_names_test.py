"""Nothing outside bertjax/tasks/ branches on a shipped task's name (STYLE.md, habit 13).

What varies per task is a field of its `Task`; code elsewhere reads the field. This
test reads the code's syntax trees, so it finds a task's name used as

    a comparison's operand          kind == "squad", kind != "pretraining"
    a membership test's element     kind in ("tagging", "squad"), also kept in a
                                    constant: WITHOUT_POOLER = ("tagging", "squad")
    a dict key                      {"classification": "BertFor..."}, dict(squad=...)
    a match-case pattern            case "tagging": ...

in bertjax/ and data_pipeline/, the suites included: a suite knows its configs by the
Task they train. A name in a default, a help text or a message is fine.
"""

import ast
import pathlib

from support import REPO

from bertjax import tasks

SCANNED = ("bertjax", "data_pipeline")
# Relative to REPO: the tasks themselves.
LEFT_OUT = ("bertjax/tasks",)


def _task_name(node, names) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return node.value
    return None


def _elements(node):
    """The node, or the elements of a tuple, list or set display."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return node.elts
    return [node]


def uses(tree: ast.AST, names) -> list[tuple[int, str, str]]:
    """(line, name, how) of each use of a task name in `names` that branches on it."""
    found = {}  # (line, column) -> (name, how); a walk meets the comparison first

    def add(node, how):
        name = _task_name(node, names)
        if name is not None:
            found.setdefault((node.lineno, node.col_offset), (name, how))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand, op in zip(node.comparators, node.ops, strict=True):
                how = "a membership test" if isinstance(op, ast.In | ast.NotIn) else "a comparison"
                for element in _elements(operand):
                    add(element, how)
            for element in _elements(node.left):
                add(element, "a comparison")
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                add(key, "a dict key")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
        ):
            for keyword in node.keywords:
                if keyword.arg in names:
                    found[keyword.lineno, keyword.col_offset] = (keyword.arg, "a dict key")
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
        ):
            # A collection of task names only: the other half of a membership test.
            if node.elts and all(_task_name(e, names) for e in node.elts):
                for element in node.elts:
                    add(element, "a collection of task names")
        elif isinstance(node, ast.MatchValue):
            add(node.value, "a match-case")
        elif isinstance(node, ast.MatchMapping):
            for key in node.keys:
                add(key, "a match-case")
    return [(line, name, how) for (line, _), (name, how) in sorted(found.items())]


def scanned_files(root: pathlib.Path) -> list[pathlib.Path]:
    files = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if not any(relative == d or relative.startswith(d + "/") for d in LEFT_OUT):
                files.append(path)
    return files


def violations(root: pathlib.Path, names) -> list[str]:
    lines = []
    for path in scanned_files(root):
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name, how in uses(tree, names):
            lines.append(f"{path.relative_to(root)}:{line}: {name!r} in {how}")
    return lines


def test_no_code_outside_the_tasks_branches_on_a_task_name():
    names = set(tasks.table())
    found = violations(REPO, names)
    assert not found, (
        "a task's name decides behaviour outside bertjax/tasks/; make it a field of the "
        "Task (bertjax/tasks/contract.py) and read that instead:\n" + "\n".join(found)
    )


def test_the_scan_sees_the_code_it_checks():
    files = {p.relative_to(REPO).as_posix() for p in scanned_files(REPO)}
    scanned = (
        "bertjax/convert/import_export.py",
        "bertjax/suites/squad.py",
        "data_pipeline/config.py",
    )
    assert set(scanned) <= files
    assert not any(f.startswith("bertjax/tasks/") for f in files)


def test_each_kind_of_branch_is_found():
    code = """
if kind == "squad": pass
if "tagging" != kind: pass
if kind in ("classification", "other"): pass
if kind not in ("tagging", "squad"): pass
WITHOUT_POOLER = ("tagging", "squad")
CLASSES = {"pretraining": 1}
CLASSES = dict(squad=2)
match kind:
    case "tagging": pass
    case {"squad": x}: pass
"""
    names = {"pretraining", "classification", "tagging", "squad"}
    assert uses(ast.parse(code), names) == [
        (2, "squad", "a comparison"),
        (3, "tagging", "a comparison"),
        (4, "classification", "a membership test"),
        (5, "tagging", "a membership test"),
        (5, "squad", "a membership test"),
        (6, "tagging", "a collection of task names"),
        (6, "squad", "a collection of task names"),
        (7, "pretraining", "a dict key"),
        (8, "squad", "a dict key"),
        (10, "tagging", "a match-case"),
        (11, "squad", "a match-case"),
    ]


def test_defaults_help_and_messages_are_not_branches():
    code = """
DEFAULT = "pretraining"
flags.DEFINE_string("task", "squad", "e.g. classification")
raise ValueError(f"needs a tagging workdir")
config.task = "classification"
"""
    assert uses(ast.parse(code), {"pretraining", "classification", "tagging", "squad"}) == []
