"""Toxics with Toxiproxy's semantics, shared by statechaos's Toxiproxy-compatible server
(``chaos.extra.toxiproxy``) and the runtime's own in-band toxic layer (``inband``):

- ``kinds``: each toxic's attributes and defaults, and what it does to the chunks of one direction;
- ``pipeline``: one direction of a connection as a chain of toxic stages, changed under live traffic;
- ``inband``: the layer inside the Spark transport that runs those pipelines at a link's own sockets.
"""
