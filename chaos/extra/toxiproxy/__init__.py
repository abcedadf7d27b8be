"""statechaos's own Toxiproxy-compatible server (which server a run uses is :mod:`chaos.cluster.toxiproxy`)."""

from chaos.extra.toxiproxy.server import VERSION, ToxiproxyServer
from chaos.extra.toxiproxy.toxics import TOXIC_TYPES, Toxic, ToxicError

__all__ = ["VERSION", "TOXIC_TYPES", "Toxic", "ToxicError", "ToxiproxyServer"]
