"""The ``local_lm`` tests run in child processes (``tests/native_isolation.py``): a native crash in one of them is
one failed test naming the signal and the library's version, and the rest of the run still reports."""

from __future__ import annotations

from pathlib import Path

import pytest

# Slow: pytest runs in a child process.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_a_native_crash_fails_one_test_and_the_run_goes_on(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_native="""
        import os
        import signal

        import pytest

        @pytest.mark.local_lm
        def test_crashes_in_native_code():
            os.kill(os.getpid(), signal.SIGSEGV)  # what a faulting llama.cpp decode does to its process

        @pytest.mark.local_lm
        def test_answers():
            assert sum([1, 2]) == 3

        @pytest.mark.local_lm
        def test_fails_as_usual():
            assert sum([1, 2]) == 4

        @pytest.mark.local_lm
        def test_without_the_extra():
            pytest.skip("the local extra is not installed")

        def test_in_the_parent():
            assert os.environ.get("MHOP_TEST_CHILD") is None
    """)
    result = pytester.runpytest_subprocess("-p", "tests.native_isolation", "-o", "markers=local_lm: native")
    result.assert_outcomes(passed=2, failed=2, skipped=1)
    assert result.ret == 1  # tests failed; the run itself did not die
    result.stdout.fnmatch_lines([
        "*_ test_crashes_in_native_code _*",
        "the test's process died of SIGSEGV in native code (llama-cpp-python *); its last output:",
    ])
    result.stdout.fnmatch_lines(["*_ test_fails_as_usual _*", "failed in its child process (exit 1):"])
