"""The simulator: the whole job in one process on a seeded scheduler (``executor.SimExecutor``),
its channels and links (``links``)."""
