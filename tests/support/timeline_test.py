"""support/timeline.py: the summary of a run's per-test times."""

import json

from support import timeline


def test_the_summary_gives_each_workers_end_the_cpu_split_and_the_costliest_files(tmp_path):
    records = [
        ("gw0", "tests/a_test.py::one", 0, 60, 30, 0),
        ("gw0", "tests/a_test.py::two", 60, 120, 0, 90),
        ("gw1", "tests/b_test.py::one", 0, 180, 6, 54),
    ]
    path = tmp_path / "timeline.jsonl"
    names = ("worker", "test", "start", "end", "cpu", "children")
    path.write_text("".join(json.dumps(dict(zip(names, r, strict=True))) + "\n" for r in records))
    assert timeline.summary(str(path)).splitlines() == [
        "gw0 ends at minute 2.0",
        "gw1 ends at minute 3.0",
        "CPU-minutes: 0.6 in pytest's workers, 2.4 in their programs",
        "   2.0 CPU-min    2.0 min  tests/a_test.py",
        "   1.0 CPU-min    3.0 min  tests/b_test.py",
    ]
