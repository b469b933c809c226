"""Dependencies point down (docs/STYLE habit 15), read from the code's own imports with `ast`:
module-level and function-local imports alike, over bertjax/ and data_pipeline/.
docs/layout.md states the rules."""

import ast
import functools

from support import REPO

PACKAGES = ("bertjax", "data_pipeline")
# The core: bertjax's own modules and the task contract with its tasks. The tools are
# bertjax's other subpackages (sweep/, tpu/, convert/, bench/, retrieval/, the suites),
# built on it.
CORE_PACKAGES = ("tasks",)
TOOLS = tuple(
    f"bertjax.{path.parent.name}"
    for path in sorted((REPO / "bertjax").glob("*/__init__.py"))
    if path.parent.name not in CORE_PACKAGES
)
FRAMEWORKS = ("jax", "flax", "optax", "orbax")
# The model, its FLOPs and its sharding need no input pipeline: of data_pipeline they
# reach its errors and its core count alone, modules that import nothing.
MODEL_MODULES = ("bertjax.model", "bertjax.flops", "bertjax.sharding")
MODEL_MAY_REACH = ("data_pipeline.errors", "data_pipeline.cores")


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


def paths_from(graph: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Each module `start` imports, directly or through others -> one chain of imports
    that gets there, `start` first."""
    chains, todo = {start: [start]}, [start]
    while todo:
        module = todo.pop(0)
        for other in sorted(graph[module]):
            if other not in chains:
                chains[other] = chains[module] + [other]
                todo.append(other)
    del chains[start]
    return chains


def package_of(graph: dict[str, set[str]]):
    """module -> the subpackage of a top-level package it is in (bertjax.tasks, for all of
    bertjax/tasks/ and below), or itself for a top-level package's own module."""
    subpackages = {
        m for m in graph if m.count(".") == 1 and any(o.startswith(m + ".") for o in graph)
    }

    def package(module: str) -> str:
        subpackage = ".".join(module.split(".")[:2])
        return subpackage if subpackage in subpackages else module

    return package


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """`graph` with each subpackage (`package_of`) taken as one node."""
    package = package_of(graph)
    collapsed = {}
    for module, named in graph.items():
        collapsed.setdefault(package(module), set()).update(package(other) for other in named)
    return {node: named - {node} for node, named in collapsed.items()}


def test_the_tools_are_found():
    tools = {
        "bertjax.tpu",
        "bertjax.bench",
        "bertjax.sweep",
        "bertjax.convert",
        "bertjax.retrieval",
    }
    assert tools <= set(TOOLS)
    assert all(module in imports() for module in MODEL_MODULES + MODEL_MAY_REACH)


def test_no_import_cycle():
    graph = _ours(imports())
    found = cycles(graph)
    described = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in found
    ]
    assert not found, "import cycles:\n" + "\n".join(described)


def test_no_import_cycle_between_packages():
    # Two subpackages that import each other, through any modules and at any depth (a
    # library and a command in one package, the command importing what imports the
    # library), are one concern split in two: tasks/ and retrieval/ were.
    graph = _ours(imports())
    package = package_of(graph)
    found = cycles(package_graph(graph))
    described = [
        " <-> ".join(c)
        + ": "
        + "; ".join(
            f"{m} imports {o}"
            for m in sorted(graph)
            for o in sorted(graph[m])
            if package(m) in c and package(o) in c and package(m) != package(o)
        )
        for c in found
    ]
    assert not found, "import cycles between packages:\n" + "\n".join(described)


def test_the_model_reaches_no_pipeline_machinery():
    graph = _ours(imports())
    wrong = sorted(
        " -> ".join(chain)
        for module in MODEL_MODULES
        for other, chain in paths_from(graph, module).items()
        if _under(other, ("data_pipeline",)) and other not in MODEL_MAY_REACH
    )
    assert not wrong, (
        f"the model's modules reach data_pipeline beyond {', '.join(MODEL_MAY_REACH)}:\n"
        + "\n".join(wrong)
    )


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


def test_package_cycles_are_found():
    graph = {
        "p.lib.a": {"p.core"},
        "p.core": {"p.cmd"},
        "p.cmd": {"p.cmd.work"},
        "p.cmd.work": {"p.lib.b"},
        "p.lib.b": set(),
        "p.lib": set(),
        "p.other": {"p.lib.a"},
    }
    assert cycles(graph) == []
    assert cycles(package_graph(graph)) == [["p.cmd", "p.core", "p.lib"]]


def test_paths_from_name_a_chain():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert paths_from(graph, "a") == {"b": ["a", "b"], "c": ["a", "b", "c"]}
