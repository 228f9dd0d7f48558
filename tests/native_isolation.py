"""A pytest plugin: tests marked ``local_lm`` run native model code (llama.cpp), so each runs in a child process.

A native fault (a segfault in a llama-cpp-python release) then fails that one test, with the signal and the
library's version named, instead of taking the whole run down and hiding every other result. The child is a
fresh interpreter running just that test (never a fork: the parent has torch's and Chroma's threads).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from xml.etree import ElementTree

import pytest

CHILD_ENV = "MHOP_TEST_CHILD"
NATIVE_PACKAGE = "llama-cpp-python"
#: Output of a failed child kept in the parent's failure message.
_TAIL_CHARS = 4000


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _skip_reason(report: Path) -> str | None:
    """The skip message of the child's one test, from its JUnit XML report (None: it did not skip)."""
    try:
        case = ElementTree.parse(report).getroot().find(".//testcase")
    except (OSError, ElementTree.ParseError):
        return None
    skipped = None if case is None else case.find("skipped")
    return None if skipped is None else skipped.get("message", "skipped")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a ``local_lm`` test's body in a child process (in the child itself, run it as usual)."""
    if os.environ.get(CHILD_ENV) or pyfuncitem.get_closest_marker("local_lm") is None:
        return None
    config = pyfuncitem.config
    with tempfile.TemporaryDirectory(prefix="mhop-child-") as folder:
        report = Path(folder) / "report.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(config.rootpath),
                   f"--junitxml={report}", pyfuncitem.nodeid]
        child = subprocess.run(command, cwd=config.rootpath, env={**os.environ, CHILD_ENV: "1"},
                               capture_output=True, text=True, errors="replace", check=False)
        skipped = _skip_reason(report)
    output = (child.stdout + child.stderr)[-_TAIL_CHARS:]
    if child.returncode < 0:
        pytest.fail(f"the test's process died of {_signal_name(child.returncode)} in native code "
                    f"({NATIVE_PACKAGE} {_version(NATIVE_PACKAGE)}); its last output:\n{output}", pytrace=False)
    if skipped is not None:
        pytest.skip(f"in its child process: {skipped}")
    if child.returncode != 0:
        pytest.fail(f"failed in its child process (exit {child.returncode}):\n{output}", pytrace=False)
    return True
