"""The programs README.md and docs/*.md tell a user to run, found in the pages themselves:
each `python -m MODULE` of this checkout (bertjax, data_pipeline, experiments) in their code
blocks and `code` spans, with the subcommands written after it (`python -m bertjax.convert
export`, `python -m bertjax.suites glue run`). tests/docs_test.py checks that each module
exists; tests/data_pipeline/cli_test.py runs each with --help.
"""

import re

from support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PACKAGES = ("bertjax", "data_pipeline", "experiments")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_MODULE = re.compile(r"\bpython3?\s+-m\s+([\w.]+)")
# The module, then the lowercase words that follow it up to the first that is not one:
# subcommands, never a path (runs/tiny), a placeholder (WORKDIR) or a flag.
_PROGRAM = re.compile(_MODULE.pattern + r"((?: [a-z][a-z_]*(?= |$))*)")


def code(text: str) -> list[str]:
    """The commands of a Markdown page: each line of its fenced blocks (continuation lines
    joined) and each `code` span of its prose (lines joined)."""
    found = []
    for block in _FENCE.findall(text):
        found += re.sub(r"\\\n\s*", " ", block).splitlines()
    found += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", _FENCE.sub("", text))]
    return found


def programs() -> dict[str, set[tuple[str, ...]]]:
    """Each of our modules the pages run with `python -m`, and the subcommands (as word
    tuples) the pages run it with."""
    found = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        calls = [(module, "") for module in _MODULE.findall(text)]  # in a sentence too
        calls += [call for command in code(text) for call in _PROGRAM.findall(command)]
        for module, words in calls:
            if module.split(".")[0] in PACKAGES:
                found.setdefault(module, set()).update([tuple(words.split())] if words else [])
    return found
