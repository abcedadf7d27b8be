"""Which failures are the user's input or environment (exit 2), the system under test giving up
(infrastructure, exit 2, its own category in reports) or a statechaos bug (a traceback)."""

from __future__ import annotations

from typing import Any

from reference_impl.errors import (
    EnvironmentFault,
    ErrorKind,
    InfrastructureError,
    InputError,
    StatechaosError,
    kind_of,
)

__all__ = [
    "EnvironmentProblem",
    "FieldProblems",
    "ErrorKind",
    "InfrastructureError",
    "InputError",
    "StatechaosError",
    "UsageError",
    "classify",
    "EXIT_OK",
    "EXIT_CHECK_FAILED",
    "EXIT_BAD_INPUT",
    "exit_code_for",
]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class EnvironmentProblem(EnvironmentFault, RuntimeError):
    """The machine lacks something a run needs (Java, a Docker engine, free task slots, ...)."""


class FieldProblems(ValueError):
    """Raised by a scenario model's validator: each problem with the path of the field it concerns,
    so the loader names its line (pydantic hands the exception back in ``ctx["error"]``)."""

    def __init__(self, problems: list[tuple[tuple[Any, ...], str]]) -> None:
        self.problems = [(tuple(loc), msg) for loc, msg in problems]
        super().__init__("; ".join(msg for _, msg in self.problems))

    @staticmethod
    def at(loc: tuple[Any, ...] | str, msg: str) -> FieldProblems:
        """One problem at ``loc`` (a field name or a path)."""
        return FieldProblems([((loc,) if isinstance(loc, str) else loc, msg)])

    @staticmethod
    def of(err: Any) -> FieldProblems | None:
        """The problems a pydantic error carries, if a validator raised them."""
        e = (err.get("ctx") or {}).get("error")
        return e if isinstance(e, FieldProblems) else None


class UsageError(InputError):
    """Bad command-line use (a missing run directory, conflicting options): one message, exit code 2."""


# the operating system's errors about a file the user named (a missing scenario, input or checkpoint):
# the only exceptions outside statechaos's root that are not a bug
_USER_FILE_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def classify(exc: BaseException) -> str:
    """``input``, ``environment``, ``infrastructure`` or ``bug`` (see ``reference_impl.errors``)."""
    if isinstance(exc, StatechaosError):
        return str(kind_of(exc))
    if isinstance(exc, _USER_FILE_ERRORS):
        return str(ErrorKind.INPUT)
    return str(ErrorKind.BUG)


def exit_code_for(kind: str) -> int:
    """Input, environment and infrastructure errors exit 2 (the run proved nothing); a bug is 1."""
    return EXIT_BAD_INPUT if kind in ("input", "environment", "infrastructure") else EXIT_CHECK_FAILED
