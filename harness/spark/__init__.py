"""The Spark executor's infrastructure: cluster lifecycle and process discovery (``cluster``) and
the TCP transport between subtasks and to the driver's coordinator (``transport``).

Nothing is imported eagerly: ``transport`` must stay usable (and testable) without pyspark, and
importing pyspark costs time in every executor's Python worker.
"""
