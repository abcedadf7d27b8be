"""The user's PySpark version: a virtual environment per version, built from PyPI and cached, in which
a Structured Streaming query's driver (and its executors' Python workers) run, while statechaos keeps
its own pins; what each version lacks; which Java each supports.

Only the standard library here: the query's driver, running under the user's PySpark, imports this.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from harness.venv_cache import VenvBuildError, cache_dir, ensure_venv

__all__ = [
    "MIN_VERSION",
    "FEATURES",
    "STATE_METADATA",
    "PysparkEnvError",
    "parse_version",
    "missing_feature",
    "has_state_source",
    "java_majors",
    "java_major",
    "check_java_for",
    "env_dir",
    "env_python",
    "ensure_env",
    "harness_only",
    "child_env",
]

MIN_VERSION = (3, 4, 0)
ENVS = "STATECHAOS_PYSPARK_ENVS"  # where the venvs live; default ~/.cache/statechaos/pyspark

# feature -> (first version with it, where that is stated), checked against Spark's sources
FEATURES: dict[str, tuple[tuple[int, int, int], str]] = {
    "applyInPandasWithState": ((3, 4, 0), "SPARK-40434"),
    "dropDuplicatesWithinWatermark": ((3, 5, 0), "SPARK-42931"),
    "transformWithStateInPandas": ((4, 0, 0), "pyspark GroupedData.transformWithStateInPandas: new in 4.0.0"),
    "transformWithState (Row-based, pyspark)": ((4, 1, 0), "SPARK-51814"),
    "the state data source (format statestore)": ((4, 0, 0), "SPARK-45511"),
    "the state metadata source (format state-metadata)": ((4, 0, 0), "SPARK-45794"),
}
STATE_SOURCE = "the state data source (format statestore)"
STATE_METADATA = "the state metadata source (format state-metadata)"


class PysparkEnvError(Exception):
    """The version cannot be used here (too old, not on PyPI, no suitable Java): an environment
    problem, exit 2."""


def parse_version(version: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", str(version).strip())
    if not m:
        raise PysparkEnvError(f"pyspark version {version!r}: expected X.Y.Z, e.g. 3.5.3")
    v = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if v < MIN_VERSION:
        raise PysparkEnvError(
            f"pyspark {version}: statechaos supports {'.'.join(map(str, MIN_VERSION))} and later"
        )
    return v


def missing_feature(version: str, feature: str) -> str | None:
    """Why ``feature`` cannot run on pyspark ``version``, or None when it can."""
    first, where = FEATURES[feature]
    if parse_version(version) >= first:
        return None
    return f"{feature} needs pyspark {'.'.join(map(str, first))} or later ({where}); this scenario runs pyspark {version}"


def has_state_source(version: str) -> bool:
    """Whether pyspark ``version`` (``pyspark.__version__``, a dev or rc suffix allowed) reads state."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return m is None or tuple(map(int, m.groups())) >= FEATURES[STATE_SOURCE][0]


def java_majors(version: str) -> tuple[int, ...]:
    """The Java releases Spark ``version`` supports (Spark's "Downloading" section of each release's
    overview page: 3.4/3.5 run on Java 8/11/17, 4.x on 17/21)."""
    return (8, 11, 17) if parse_version(version) < (4, 0, 0) else (17, 21)


def java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0_392" is Java 8


def check_java_for(version: str) -> str:
    """The Java (JAVA_HOME first, then PATH) that runs pyspark ``version``; PysparkEnvError naming
    what was found and what the version needs otherwise."""
    wanted = java_majors(version)
    candidates = [os.path.join(os.environ["JAVA_HOME"], "bin", "java")] if os.environ.get("JAVA_HOME") else []
    candidates += [shutil.which("java") or ""]
    found = []
    for java in candidates:
        if not java or not os.access(java, os.X_OK):
            continue
        major = java_major(java)
        if major in wanted:
            return java
        found.append(f"{java} is Java {major or '?'}")
    seen = "; ".join(found) if found else "no Java found (JAVA_HOME unset, no java on PATH)"
    raise PysparkEnvError(
        f"pyspark {version} runs on Java {'/'.join(map(str, wanted))}: {seen}. "
        "Set JAVA_HOME to a Java it supports"
    )


def requirements(version: str) -> list[str]:
    """What the query's driver needs next to pyspark ``version``: pandas, pyarrow and numpy releases
    that version was built against (pyspark < 4 predates numpy 2 and pandas 2.1), protobuf for
    transformWithStateInPandas (4.x), psutil for statechaos's cluster code. No grpc: no Spark Connect."""
    v = parse_version(version)
    reqs = [f"pyspark=={version}", "psutil>=5.9,<8"]
    if v < (3, 5, 0):
        reqs += ["pandas>=1.5,<2.0", "pyarrow>=11,<13", "numpy>=1.23,<2"]
    elif v < (4, 0, 0):
        reqs += ["pandas>=2.0,<2.1", "pyarrow>=12,<15", "numpy>=1.23,<2"]
    else:
        # pyspark 4.0's applyInPandasWithState reader fails on pyarrow 26 with pandas 2.3
        # (RecordBatch.slice: 'float' object cannot be interpreted as an integer)
        newest = (
            ["pandas>=2.2,<2.3", "pyarrow>=15,<20", "numpy>=1.26,<2.3"]
            if v < (4, 1, 0)
            else ["pandas>=2.2,<3", "pyarrow>=15", "numpy>=1.26"]
        )
        reqs += [*newest, "protobuf>=5.28,<8"]
    return reqs


def env_dir(version: str) -> Path:
    return cache_dir("pyspark", ENVS) / version


def env_python(version: str) -> Path:
    return env_dir(version) / "bin" / "python"


def ensure_env(version: str, say: Callable[[str], None] = print) -> Path:
    """The Python of the venv for pyspark ``version``, built first if missing (``say`` reports each
    step), cached by :func:`harness.venv_cache.ensure_venv`."""
    parse_version(version)
    try:
        return ensure_venv(env_dir(version), requirements(version), f"pyspark {version}", "about 350 MB", say)
    except VenvBuildError as e:
        raise PysparkEnvError(str(e)) from None


def harness_only(folder: Path) -> Path:
    """``folder`` holding only statechaos's ``harness`` and ``reference_impl`` packages (links), for
    the import path of a child running another pyspark: the project root may be a site-packages
    folder that also holds the harness's own pyspark, pandas and numpy."""
    root = Path(__file__).resolve().parents[2]
    folder.mkdir(parents=True, exist_ok=True)
    for pkg in ("harness", "reference_impl"):
        link = folder / pkg
        if not link.exists():
            link.symlink_to(root / pkg, target_is_directory=True)
    return folder


def child_env(python: Path | None, pylib: Path) -> dict[str, str]:
    """The environment of a child process running a user's query, its replay or its analysis: with
    ``python`` None (statechaos's own pyspark) the project and this process's import path; with the
    user's venv, only statechaos's packages (linked in ``pylib``) ahead of the user's modules, and no
    Spark settings of ours, so our pyspark never shadows theirs. The project, the working directory and
    this process's own (non-site) import path carry the user's modules."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    if python is not None:
        root = str(harness_only(pylib))
        for var in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
            env.pop(var, None)
    own = [p for p in sys.path if p and Path(p).is_dir() and not p.startswith((sys.prefix, sys.base_prefix))]
    paths = [root, os.getcwd(), *own, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    exe = str(python) if python is not None else sys.executable
    env["PATH"] = os.pathsep.join([str(Path(exe).parent), env.get("PATH", "")])
    return env
