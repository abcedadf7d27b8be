"""Chaos for Spark Structured Streaming queries: executor and driver kills, state-store checkpoint
damage, and the verdicts the oracles of :mod:`harness.sss.oracles` reach."""
