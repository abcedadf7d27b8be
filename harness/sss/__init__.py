"""Spark Structured Streaming (transformWithStateInPandas) queries as the system under test.

``spec`` names the user's StatefulProcessor; ``driver`` runs it as a streaming query in a child
process (so chaos can kill the driver); ``checkpoint_log`` reads the query's offset, commit and
source logs; ``model`` runs the same processor on ``reference_impl`` state; ``oracles`` compare.
"""
