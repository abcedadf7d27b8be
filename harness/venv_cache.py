"""A virtual environment built once from PyPI and cached under ``~/.cache/statechaos/<kind>/<version>``,
for a framework whose pins clash with statechaos's own (a user's PySpark, PyFlink as a benchmark peer):
it runs in a subprocess of that venv's Python.

Built under a file lock into a fresh folder and marked complete last, so concurrent users wait and
reuse one build, and an interrupted build is removed and redone, never used. Only the standard
library here: a PySpark query's driver, running in such a venv, imports this.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from reference_impl.errors import EnvironmentFault

__all__ = ["VenvBuildError", "cache_dir", "is_built", "ensure_venv"]

DONE = ".statechaos-complete"  # written last: a venv without it is half-built and never used


class VenvBuildError(EnvironmentFault, RuntimeError):
    """pip could not build the environment (no network, no matching distribution...): the machine's
    problem, not a statechaos bug."""


def cache_dir(kind: str, override_var: str) -> Path:
    """Where the venvs of ``kind`` live: ``$override_var`` if set, else ``~/.cache/statechaos/<kind>``."""
    return Path(os.environ.get(override_var) or str(Path.home() / ".cache" / "statechaos" / kind))


def is_built(where: Path) -> bool:
    """Whether ``where`` holds a completely built environment."""
    return (where / DONE).exists()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # one builder per environment; the others wait, then reuse it
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_venv(
    where: Path, requirements: list[str], label: str, size: str, say: Callable[[str], None] = print
) -> Path:
    """The Python of the venv at ``where`` holding ``requirements``, built first if missing (``say``
    reports each step, ``label`` names the environment in them, ``size`` says what pip downloads)."""
    python = where / "bin" / "python"
    if is_built(where):
        return python
    with _locked(where.parent / f".{where.name}.lock"):
        if is_built(where):
            return python
        if where.exists():
            say(f"{label}: removing a half-built environment at {where}")
            shutil.rmtree(where)
        say(f"{label}: creating an environment at {where} (first use; pip downloads {size})")
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", str(where)], check=True, capture_output=True, text=True
            )
            say(f"{label}: installing {' '.join(requirements)}")
            subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *requirements],
                           check=True, capture_output=True, text=True)  # fmt: skip
        except subprocess.CalledProcessError as e:
            shutil.rmtree(where, ignore_errors=True)
            tail = "\n".join((e.stderr or e.stdout or "").strip().splitlines()[-5:])
            raise VenvBuildError(f"{label}: could not build its environment: {tail}") from None
        except BaseException:  # Ctrl-C mid-build: nothing half-built is left to find
            shutil.rmtree(where, ignore_errors=True)
            raise
        (where / DONE).write_text(" ".join(requirements))
        say(f"{label}: environment ready")
    return python
