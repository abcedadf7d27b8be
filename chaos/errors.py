"""Which failures are the user's input or environment (exit 2) rather than a bug (a traceback)."""

from __future__ import annotations

__all__ = ["EnvironmentProblem", "classify"]


class EnvironmentProblem(RuntimeError):
    """The machine lacks something a run needs (Java, a Docker engine, free task slots, ...)."""


def _input_error_types() -> tuple[type[BaseException], ...]:
    from reference_impl.serializers import SerializerError
    from reference_impl.snapshot import StateRestoreError

    types: list[type[BaseException]] = [
        EnvironmentProblem,
        SerializerError,
        StateRestoreError,
        FileNotFoundError,
        PermissionError,
        IsADirectoryError,
        NotADirectoryError,
    ]
    try:
        from reference_impl.checkpoint import CheckpointError  # type: ignore[attr-defined]

        types.append(CheckpointError)
    except ImportError:
        pass
    return tuple(types)


def classify(exc: BaseException) -> str:
    """``"input"`` for bad input or environment, ``"bug"`` for anything else."""
    return "input" if isinstance(exc, _input_error_types()) else "bug"
