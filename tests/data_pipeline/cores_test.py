"""data_pipeline.cores: the cores this process may run on, not the machine's."""

import os
import subprocess
import sys

import pytest
from support import REPO

from data_pipeline import cores


def test_the_cores_are_those_this_process_may_run_on():
    assert cores.usable_cores() == len(os.sched_getaffinity(0)) >= 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a second core to leave out")
def test_a_process_held_to_one_core_has_one():
    script = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from data_pipeline import cores; print(cores.usable_cores())"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert result.stdout.strip() == "1"
