"""The replay's Python worker daemon (harness.sss.python_daemon): pandas and pyarrow are imported
before it forks, without jemalloc's background thread (a thread alive at a fork may hold a lock the
child then waits on forever)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import os, sys
from harness.sss import python_daemon
python_daemon._preload()
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(",".join(names)); print("pandas" in sys.modules and "pyarrow" in sys.modules)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_daemon_imports_pandas_and_pyarrow_without_jemallocs_thread() -> None:
    pytest.importorskip("pyarrow")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout.split()
    assert "jemalloc_bg_thd" not in out[0].split(","), out
    assert out[1] == "True", out
