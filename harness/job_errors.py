"""The error a job definition raises when it is inconsistent (its own module, so the job API's
modules can all raise it without importing each other)."""

from __future__ import annotations

__all__ = ["JobDefinitionError"]


class JobDefinitionError(ValueError):
    """A job graph is inconsistent (names, parallelism, missing parts)."""
