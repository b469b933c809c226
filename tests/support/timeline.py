"""Where a run of the suite spends its time: a pytest plugin that writes, for each test,
its worker, start, end and CPU time (`os.times()` around it: its own process's, and the
child programs it waited for) as a line of JSON; and a summary of such a file.

    PYTHONPATH=tests/support PYTEST_ADDOPTS="-p timeline" TIMELINE_OUT=/tmp/timeline.jsonl \
        make test-all
    cd tests && python -m support.timeline /tmp/timeline.jsonl

(PYTHONPATH=tests would put tests/bertjax before the package in the programs the tests
start: the two-process runs then fail with `No module named 'bertjax.tasks.contract'`.)

The summary gives each worker's last minute (workers that end far apart share the tests
out badly), the CPU-minutes in pytest's workers and in the programs the tests start, and
the costliest files. docs/testing.md quotes it.
"""

import collections
import json
import os
import sys
import time

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, before = time.time(), os.times()
    yield
    end, after = time.time(), os.times()
    record = {
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "master"),
        "test": item.nodeid,
        "start": start,
        "end": end,
        "cpu": after.user - before.user + after.system - before.system,
        "children": (
            after.children_user
            - before.children_user
            + after.children_system
            - before.children_system
        ),
    }
    with open(os.environ.get("TIMELINE_OUT", "timeline.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def summary(path: str, files: int = 16) -> str:
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    first = min(r["start"] for r in records)
    lines = []
    for worker in sorted({r["worker"] for r in records}):
        end = max(r["end"] for r in records if r["worker"] == worker)
        lines.append(f"{worker} ends at minute {(end - first) / 60:.1f}")
    own = sum(r["cpu"] for r in records) / 60
    children = sum(r["children"] for r in records) / 60
    lines.append(f"CPU-minutes: {own:.1f} in pytest's workers, {children:.1f} in their programs")
    cpu, wall = collections.Counter(), collections.Counter()
    for r in records:
        file = r["test"].split("::")[0]
        cpu[file] += (r["cpu"] + r["children"]) / 60
        wall[file] += (r["end"] - r["start"]) / 60
    for file, minutes in cpu.most_common(files):
        lines.append(f"{minutes:6.1f} CPU-min {wall[file]:6.1f} min  {file}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(sys.argv[1]))
