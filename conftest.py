"""Shared pytest configuration for the statechaos suites (options live in the statechaos plugin)."""
