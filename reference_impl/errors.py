"""The root of statechaos's own exceptions and the classification the CLI maps to exit codes.

Every error statechaos raises on purpose says whose problem it is:

- ``input``: a scenario, checkpoint or state file is wrong (the user fixes the file);
- ``environment``: the machine lacks something a run needs (Java, Docker, free task slots);
- ``infrastructure``: the system under test gave up (Spark stopped retrying a stage, the driver's
  restart strategy ran out): the run proved nothing either way, and it is not a failed check;
- ``bug``: anything else, a defect of statechaos itself (a traceback is the right report).

It lives in ``reference_impl`` (the lowest layer) so every layer can raise its errors under it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorKind", "StatechaosError", "InputError", "EnvironmentFault", "InfrastructureError", "kind_of"]


class ErrorKind(StrEnum):
    INPUT = "input"
    ENVIRONMENT = "environment"
    INFRASTRUCTURE = "infrastructure"
    BUG = "bug"


class StatechaosError(Exception):
    """Root of statechaos's exceptions; ``kind`` is who must act on it."""

    kind: ErrorKind = ErrorKind.BUG


class InputError(StatechaosError):
    """Bad input: a file or argument the user gave."""

    kind = ErrorKind.INPUT


class EnvironmentFault(StatechaosError):
    """The machine lacks something a run needs."""

    kind = ErrorKind.ENVIRONMENT


class InfrastructureError(StatechaosError):
    """The system under test gave up (retries or restarts exhausted); ``root_cause`` is the first
    real error behind it (an executor's Python traceback, not the JVM's wrapper)."""

    kind = ErrorKind.INFRASTRUCTURE

    def __init__(self, message: str, root_cause: str = "") -> None:
        super().__init__(message)
        self.root_cause = root_cause


def kind_of(exc: BaseException) -> ErrorKind:
    """The classification of any exception: its own ``kind`` under the root, else ``bug``."""
    return exc.kind if isinstance(exc, StatechaosError) else ErrorKind.BUG
