"""Dependencies point down (docs/STYLE habit 15), read from the code's own imports with `ast`:
module-level and function-local imports alike, over bertjax/ and data_pipeline/."""

import ast
import functools

from support import REPO

PACKAGES = ("bertjax", "data_pipeline")
# The core: bertjax's own modules, the task contract with its tasks, and retrieval's
# measures and search, which the retrieval task evaluates with. The tools are bertjax's
# other subpackages (sweep/, tpu/, convert/, bench/, the suites), built on it.
CORE_PACKAGES = ("tasks", "retrieval")
TOOLS = tuple(
    f"bertjax.{path.parent.name}"
    for path in sorted((REPO / "bertjax").glob("*/__init__.py"))
    if path.parent.name not in CORE_PACKAGES
)
FRAMEWORKS = ("jax", "flax", "optax", "orbax")


def _module_name(path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def imports() -> dict[str, set[str]]:
    """module -> the modules it imports: of ours, the most specific module named
    (`from bertjax.tasks import squad` imports bertjax.tasks.squad); others by full name."""
    paths = {
        _module_name(path): path for package in PACKAGES for path in (REPO / package).rglob("*.py")
    }
    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        named = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package this module is in
                    up = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{up}.{base}" if base else up
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    named.add(child if child in paths else base)
        graph[module] = named - {module}
    return graph


def _ours(graph) -> dict[str, set[str]]:
    return {module: {m for m in named if m in graph} for module, named in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _under(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_tools_are_found():
    assert {"bertjax.tpu", "bertjax.bench", "bertjax.sweep", "bertjax.convert"} <= set(TOOLS)


def test_no_import_cycle():
    graph = _ours(imports())
    found = cycles(graph)
    described = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in found
    ]
    assert not found, "import cycles:\n" + "\n".join(described)


def test_core_imports_no_tool():
    wrong = sorted(
        f"{module} imports {other}"
        for module, named in _ours(imports()).items()
        if not _under(module, TOOLS)
        for other in named
        if _under(other, TOOLS)
    )
    assert not wrong, "core modules import tools:\n" + "\n".join(wrong)


def test_the_library_imports_no_experiment():
    wrong = sorted(
        f"{module} imports {other}"
        for module, named in imports().items()
        for other in named
        if _under(other, ("experiments",))
    )
    assert not wrong, "the library imports experiment configs:\n" + "\n".join(wrong)


def test_data_pipeline_imports_no_jax():
    wrong = sorted(
        f"{module} imports {other}"
        for module, named in imports().items()
        if _under(module, ("data_pipeline",))
        for other in named
        if _under(other, FRAMEWORKS + ("bertjax",))
    )
    assert not wrong, "data_pipeline imports jax or its libraries:\n" + "\n".join(wrong)


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
