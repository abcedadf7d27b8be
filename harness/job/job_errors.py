"""The errors of a job: an inconsistent definition, and a job that cannot go on. Their own module, so
the job API's modules and light ones (``harness.progress``, imported by the Structured Streaming driver
under a user's PySpark, which has none of statechaos's dependencies) can raise them without importing
the job master."""

from __future__ import annotations

from reference_impl.errors import InfrastructureError, InputError

__all__ = ["JobDefinitionError", "JobFailure"]


class JobFailure(InfrastructureError, RuntimeError):
    """The job cannot go on (restart budget spent, unrestorable state); the message says why and
    ``root_cause`` holds the first real error behind it."""


class JobDefinitionError(InputError, ValueError):
    """A job graph is inconsistent (names, parallelism, missing parts): the user's job, so bad input."""
