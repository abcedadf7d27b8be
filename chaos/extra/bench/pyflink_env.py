"""PyFlink, the benchmark peer, in a venv of its own: ``apache-flink`` pins older pyarrow (through
apache-beam, <17) and pandas (<2.3) than statechaos does, so it cannot share statechaos's venv. The
venv is built once, explicitly (about 850 MB on disk, several minutes the first time), by
``statechaos bench --setup-pyflink``, and cached by :mod:`harness.venv_cache`; the benchmark never
downloads it implicitly and says how to build it when it is missing.

``PYFLINK_VERSION`` is the version the ``pyflink`` extra of ``pyproject.toml`` declares (a test keeps
them equal); the extra documents the peer's pin and is not meant for statechaos's own venv.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from harness.sss.pyspark_env import java_major
from harness.venv_cache import VenvBuildError, cache_dir, ensure_venv, is_built

__all__ = [
    "PYFLINK_VERSION",
    "SETUP_COMMAND",
    "ENVS",
    "PyflinkUnavailable",
    "env_dir",
    "find_java",
    "ready_python",
    "setup",
]

PYFLINK_VERSION = "2.3.0"
ENVS = "STATECHAOS_PYFLINK_ENVS"  # where the venvs live; default ~/.cache/statechaos/pyflink
SETUP_COMMAND = "statechaos bench --setup-pyflink"
JAVA_MAJORS = (11, 17, 21)  # Flink 2.x runs on Java 11, 17 and 21 (its "Java compatibility" page)


class PyflinkUnavailable(Exception):
    """PyFlink cannot run here; the message says why and what to run."""


def env_dir(version: str = PYFLINK_VERSION) -> Path:
    return cache_dir("pyflink", ENVS) / version


def find_java() -> str:
    """The Java PyFlink will run on (JAVA_HOME first, then PATH), or PyflinkUnavailable."""
    home = os.environ.get("JAVA_HOME")
    candidates = [os.path.join(home, "bin", "java")] if home else []
    candidates.append(shutil.which("java") or "")
    seen = []
    for java in candidates:
        if java and os.access(java, os.X_OK):
            major = java_major(java)
            if major in JAVA_MAJORS:
                return java
            seen.append(f"{java} is Java {major or '?'}")
    found = "; ".join(seen) or "no Java found (JAVA_HOME unset, no java on PATH)"
    raise PyflinkUnavailable(
        f"PyFlink {PYFLINK_VERSION} runs on Java {'/'.join(map(str, JAVA_MAJORS))}: {found}"
    )


def ready_python(version: str = PYFLINK_VERSION) -> Path:
    """The Python of the built PyFlink venv; PyflinkUnavailable naming the command that builds it
    when there is none (nothing is downloaded here)."""
    where = env_dir(version)
    if not is_built(where):
        raise PyflinkUnavailable(
            f"PyFlink {version} is not set up (no environment at {where}); enable it with "
            f"`{SETUP_COMMAND}` (builds that venv once: pip downloads about 350 MB, needs network)"
        )
    find_java()
    return where / "bin" / "python"


def setup(say: Callable[[str], None] = print, version: str = PYFLINK_VERSION) -> Path:
    """Build (or find) the PyFlink venv; PyflinkUnavailable if pip fails or no suitable Java."""
    find_java()
    try:
        return ensure_venv(
            env_dir(version), [f"apache-flink=={version}"], f"PyFlink {version}", "about 350 MB", say
        )
    except VenvBuildError as e:
        raise PyflinkUnavailable(str(e)) from None
