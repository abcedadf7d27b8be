"""Which failures are the user's input or environment (exit 2), the system under test giving up
(infrastructure, exit 2, its own category in reports) or a statechaos bug (a traceback)."""

from __future__ import annotations

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


class UsageError(InputError):
    """Bad command-line use (a missing run directory, conflicting options): one message, exit code 2."""


def _foreign_kinds() -> list[tuple[type[BaseException], ErrorKind]]:
    """Exceptions outside the root that still mean bad input or environment."""
    from reference_impl.serializers import SerializerError
    from reference_impl.snapshot import StateRestoreError

    out: list[tuple[type[BaseException], ErrorKind]] = [
        (SerializerError, ErrorKind.INPUT),
        (StateRestoreError, ErrorKind.INPUT),
        (FileNotFoundError, ErrorKind.INPUT),
        (PermissionError, ErrorKind.INPUT),
        (IsADirectoryError, ErrorKind.INPUT),
        (NotADirectoryError, ErrorKind.INPUT),
    ]
    try:
        from reference_impl.checkpoint import CheckpointError

        out.append((CheckpointError, ErrorKind.INPUT))
    except ImportError:
        pass
    try:
        from harness.spark.cluster import SparkEnvironmentError

        out.append((SparkEnvironmentError, ErrorKind.ENVIRONMENT))
    except ImportError:  # pragma: no cover - harness without the Spark extra
        pass
    return out


def classify(exc: BaseException) -> str:
    """``input``, ``environment``, ``infrastructure`` or ``bug`` (see ``reference_impl.errors``)."""
    if isinstance(exc, StatechaosError):
        return str(kind_of(exc))
    for t, kind in _foreign_kinds():
        if isinstance(exc, t):
            return str(kind)
    return str(ErrorKind.BUG)


def exit_code_for(kind: str) -> int:
    """Input, environment and infrastructure errors exit 2 (the run proved nothing); a bug is 1."""
    return EXIT_BAD_INPUT if kind in ("input", "environment", "infrastructure") else EXIT_CHECK_FAILED
