"""The suite's tiers, as pytest markers (registered in setup.cfg, --strict-markers).

A test carries one marker when what it checks takes more than a few seconds or
needs more than this process:

    command      one short end-to-end run of a user-facing command, as a user starts it
    slow         a unit test that is slow only because of what it computes
    integration  the process boundary or the whole training loop is what it checks
    emulator     it starts a server: the GCS emulator, PostgreSQL
    tpu_compile  it compiles for TPU devices with libtpu's compiler
    gpu          it needs a GPU (skipped without one)

The rest is the unit tier, `make test-fast`; `make test` runs it and the `command`
tests, `make test-all` every tier. An unmarked test whose body uses more than
UNIT_LIMIT_S of CPU time (this process's, all threads: compiling included), or
waits more than UNIT_WALL_LIMIT_S, fails, so the unit tier stays fast as tests
are added. CPU time, not wall time, so that a loaded machine (CI,
xdist workers sharing two cores) does not fail a test that is fast; the call
alone, not its fixtures, which are shared (the first user of a session fixture
should not pay for it). `-o unit_cpu_limit_s=N` changes the CPU limit for one
run; 0 turns the check off.

The order the tests run in is set here too: the longest files first (LONGEST_FILES).
"""

import pathlib
import time

import pytest

TIERS = ("command", "slow", "integration", "emulator", "tpu_compile", "gpu")
UNIT_LIMIT_S = 8.0  # of CPU time
UNIT_WALL_LIMIT_S = 60.0


def is_unit(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(name) for name in TIERS)


_CPU_S = pytest.StashKey[float]()


def pytest_addoption(parser):
    parser.addini("unit_cpu_limit_s", "CPU seconds an unmarked test may use", default="")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    start = time.process_time()
    yield
    item.stash[_CPU_S] = time.process_time() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    limit = float(item.config.getini("unit_cpu_limit_s") or UNIT_LIMIT_S)
    if call.when != "call" or not report.passed or limit <= 0 or not is_unit(item):
        return
    cpu_s = item.stash.get(_CPU_S, 0.0)
    if cpu_s > limit or call.duration > UNIT_WALL_LIMIT_S:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} used {cpu_s:.1f} s of CPU in {call.duration:.1f} s, more than a "
            f"unit test's {limit:g} s of CPU (unit_cpu_limit_s) or "
            f"{UNIT_WALL_LIMIT_S:g} s: make it faster, or mark it with one of "
            f"{', '.join(TIERS)} (tests/support/tiers.py says which)"
        )


# The files that take longest in the whole suite, longest first (their tests' wall time
# in `make test-all`, fixtures included: the learning tests about 17 minutes, the others
# 4 to 7), and so in `make test`, whose longest is commands_test.py (its fixtures' chain,
# pretrained then fine-tuned, then the tests that read them: 5 minutes or more, which
# started at minute 3.5 behind the files collected before it). A scheduling hint only: a
# file missing here runs later.
LONGEST_FILES = (
    "bertjax/tasks/finetune_learning_test.py",
    "readme_test.py",
    "bertjax/train_test.py",
    "bertjax/convert/savedmodel_test.py",
    "bertjax/checkpoint_faults_test.py",
    "bertjax/faults_test.py",
    "bertjax/tpu/compile_report_test.py",
    "commands_test.py",
    "bertjax/elastic_test.py",
    "bertjax/model_test.py",
    "bertjax/sweep/sweep_test.py",
    "bertjax/suites/glue/glue_run_test.py",
    "bertjax/multihost_test.py",
    "bertjax/tpu/launch_test.py",
    "bertjax/bench/encoders_bench_test.py",
    "bertjax/convert/import_export_test.py",
    "bertjax/gcs_test.py",
    # make test's longest after commands_test.py (1.5 to 2.5 minutes each)
    "bertjax/suites/suites_squad_test.py",
    "bertjax/bench/embedding_bench_test.py",
    "bertjax/bench/reranking_bench_test.py",
    "bertjax/bench/serving_bench_test.py",
)


def pytest_collection_modifyitems(items):
    """The longest files first (LONGEST_FILES), then the other files with integration and
    emulator tests (minutes each), the unit tier last, so that the xdist workers finish
    together instead of one running a long test alone at the end. A file's tests stay
    together, in their order, so that its module fixtures are made once.

    `make test-all` hands out whole files (`--dist loadfile`), each to the next worker
    free; `make test`, whose command tier is one file of long tests, hands out two tests
    at a time (`--dist load --maxschedchunk 2`). xdist's default hands each worker a block
    of consecutive tests, so one worker would get every long one; work stealing takes
    from the end of a worker's block, which leaves it the long ones at its start."""
    order = ("integration", "emulator", "command", "tpu_compile", "slow")
    tests = pathlib.Path(__file__).parents[1]

    def rank(item):
        marks = [i for i, name in enumerate(order) if item.get_closest_marker(name)]
        return min(marks, default=len(order))

    file_rank = {}
    for item in items:
        file_rank[item.path] = min(file_rank.get(item.path, len(order)), rank(item))
    longest = {tests / name: i - len(LONGEST_FILES) for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: longest.get(item.path, file_rank[item.path]))
