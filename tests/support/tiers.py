"""The suite's tiers, as pytest markers (registered in setup.cfg, --strict-markers).

A test carries one marker when what it checks takes more than a few seconds or
needs more than this process:

    slow         a unit test that is slow only because of what it computes
    integration  the process boundary or the whole training loop is what it checks
    emulator     it starts a server: the GCS emulator, PostgreSQL
    tpu_compile  it compiles for TPU devices with libtpu's compiler
    gpu          it needs a GPU (skipped without one)

The rest is the unit tier, `make test-fast`. An unmarked test whose body runs
longer than UNIT_LIMIT_S fails (the time is its call alone: fixtures are
shared, and the first user of a session fixture should not pay for it), so the
unit tier stays fast as tests are added. BERTJAX_TEST_UNIT_LIMIT_S changes the
limit for one run (a loaded machine), 0 turns the check off.
"""

import os

import pytest

TIERS = ("slow", "integration", "emulator", "tpu_compile", "gpu")
UNIT_LIMIT_S = float(os.environ.get("BERTJAX_TEST_UNIT_LIMIT_S", "10"))


def is_unit(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(name) for name in TIERS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (
        call.when == "call"
        and report.passed
        and UNIT_LIMIT_S > 0
        and call.duration > UNIT_LIMIT_S
        and is_unit(item)
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {call.duration:.1f} s, more than a unit test's "
            f"{UNIT_LIMIT_S:g} s (BERTJAX_TEST_UNIT_LIMIT_S): make it faster, or mark it "
            f"with one of {', '.join(TIERS)} (tests/support/tiers.py says which)"
        )
