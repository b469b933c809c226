"""The tiers plugin: an unmarked test that computes too long fails; a marked one does not."""

import textwrap

pytest_plugins = ["pytester"]


def test_an_unmarked_test_over_the_cpu_limit_fails_and_a_marked_one_passes(pytester, monkeypatch):
    monkeypatch.setenv("BERTJAX_TEST_UNIT_LIMIT_S", "0.2")
    pytester.makepyfile(
        textwrap.dedent(
            """\
            import time

            import pytest


            def burn(seconds):
                start = time.process_time()
                while time.process_time() - start < seconds:
                    pass


            def test_unmarked_and_slow():
                burn(0.5)


            @pytest.mark.slow
            def test_marked_and_slow():
                burn(0.5)


            def test_unmarked_and_waiting():
                time.sleep(0.5)  # waiting costs no CPU


            def test_unmarked_and_quick():
                burn(0.01)
            """
        )
    )
    result = pytester.runpytest(
        "-p", "support.tiers", "-o", "markers=slow: x", "-o", "unit_cpu_limit_s=0.2"
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked_and_slow used * s of CPU*mark it with one of*"])
