"""README.md and docs/: every relative link and anchor resolves, every `python -m` module
and `make` target they name exists, and the README stays short."""

import pathlib
import re

import pytest
from support import REPO, programs

ROOT = pathlib.Path(REPO)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """`text` without its fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def anchors(path: pathlib.Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    found = set()
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_pages_are_the_ones_checked():
    assert {p.name for p in PAGES} >= {"README.md", "reference.md", "testing.md", "finetuning.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such heading in {linked.name}")
    assert not broken, f"{page.name}: {broken}"


def test_every_python_dash_m_module_named_exists():
    modules = set(programs.programs())
    assert "bertjax.main" in modules and "data_pipeline.builtin_tasks" in modules
    missing = []
    for module in sorted(modules):
        path = ROOT.joinpath(*module.split("."))
        if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
            missing.append(module)
    assert not missing


def test_every_make_target_named_exists():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.M))
    named = set()
    for page in PAGES:
        named |= set(re.findall(r"`make ([\w-]+)", page.read_text(encoding="utf-8")))
        named |= set(re.findall(r"^make ([\w-]+)", page.read_text(encoding="utf-8"), re.M))
    assert {"demo", "test", "test-fast", "minilm"} <= named
    assert named <= targets, named - targets


def test_the_readme_is_at_most_300_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300
