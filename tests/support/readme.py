"""The README's commands, for the tests that run them as written.

`command(prefix)` is the one README command that starts with `prefix`, as an
argument list (continuation lines joined); tests/readme_test.py checks that every
command of the README is fetched this way by some test, or says why not.
`tour_dir(root)` is a folder to run them from: the README's relative paths
(experiments/...) resolve to this checkout, and what they write (runs/,
builtin_tasks/, exported/) stays under `root`.
"""

import pathlib
import re
import shlex

from support import REPO

README = REPO / "README.md"
# The first word of a line in a code block that is a command to run.
_COMMAND = re.compile(r"^(python -[mc] |make )")


def commands() -> list[str]:
    """Every command in the README's code blocks, continuation lines joined."""
    found, block, pending = [], False, ""
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            block, pending = not block, ""
            continue
        if not block:
            continue
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        pending = ""
        if _COMMAND.match(line):
            found.append(line.split("  #")[0].strip())
    return found


def python_snippets() -> list[str]:
    """The README's ```python blocks."""
    text = README.read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def command(prefix: str) -> list[str]:
    """The README command that starts with `prefix`, split as a shell would."""
    matches = [c for c in commands() if c.startswith(prefix)]
    assert len(matches) == 1, f"{len(matches)} README commands start with {prefix!r}: {matches}"
    return shlex.split(matches[0])


def tour_dir(root: pathlib.Path) -> pathlib.Path:
    """`root`, with the checkout's experiments/ linked in."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "experiments").symlink_to(REPO / "experiments")
    return root
