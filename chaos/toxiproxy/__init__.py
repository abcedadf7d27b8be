"""statechaos's own Toxiproxy-compatible server, and the choice of which server a run uses."""

from chaos.toxiproxy.server import VERSION, ToxiproxyServer
from chaos.toxiproxy.toxics import TOXIC_TYPES, Toxic, ToxicError

__all__ = ["VERSION", "TOXIC_TYPES", "Toxic", "ToxicError", "ToxiproxyServer"]
