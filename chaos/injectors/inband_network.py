"""Network faults in band: the same toxics as through Toxiproxy, acted out by the runtime's own transport
(``harness.toxics.inband``), so they need no proxy next to the links and work on any cluster.

The driver applies a toxic to its own layer (it holds the run's table, shipped to tasks deployed later,
and is the far end of every coordinator link) and tells the tasks at both ends of each link over their
coordinator links; each end applies the direction it sends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaos.injectors.base import Injector
from chaos.injectors.network import toxic_request
from harness.driver.messages import Toxic
from harness.toxics.inband import link_ends, toxic_layer
from harness.toxics.kinds import TOXIC_TYPES, ToxicSpec

__all__ = ["InbandToxic", "InbandCut", "Send"]

Send = Callable[[str, Toxic], Any]  # (task, message): the driver's coordinator link to a task


def _tell(send: Send, link: str, op: str, arg: Any) -> None:
    toxic_layer().handle(op, link, arg)
    for task in link_ends(link):
        send(task, Toxic(op, link, arg))  # a task not connected (restarting) gets the table when deployed


class InbandToxic(Injector):
    """Add one toxic to the run's own links, in band; remove it on ``stop``. ``jitter`` is the latency
    toxic with a jitter attribute, as with the proxy."""

    kind = "network"

    def __init__(
        self,
        send: Send,
        links: list[str],
        toxic: str,
        attributes: dict[str, Any] | None = None,
        stream: str = "downstream",
        toxicity: float = 1.0,
        run_id: str = "",
    ) -> None:
        self.send, self.links, self.toxic = send, list(links), toxic
        name, typ, attrs = toxic_request(toxic, attributes, run_id)
        attrs = {k: int(v) for k, v in attrs.items()}
        self.spec = ToxicSpec(name, typ, stream, float(toxicity), {**TOXIC_TYPES[typ], **attrs})
        self._added = False

    def start(self) -> None:
        self._added = True
        for link in self.links:
            _tell(self.send, link, "add", self.spec.to_wire())

    def stop(self) -> None:
        if self._added:
            self._added = False
            for link in self.links:
                _tell(self.send, link, "remove", self.spec.name)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "via": "inband",
            "toxic": self.toxic,
            "target": ", ".join(self.links),
            "stream": self.spec.direction,
            "toxicity": self.spec.toxicity,
            "attributes": dict(self.spec.attributes),
        }


class InbandCut(Injector):
    """Cut links completely, in band: their connections close and new ones are refused until ``stop``
    (Toxiproxy's disabled proxy)."""

    kind = "network"

    def __init__(self, send: Send, links: list[str]) -> None:
        self.send, self.links = send, list(links)
        self._cut = False

    def start(self) -> None:
        self._cut = True
        for link in self.links:
            _tell(self.send, link, "cut", True)

    def stop(self) -> None:
        if self._cut:
            self._cut = False
            for link in self.links:
                _tell(self.send, link, "cut", False)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "via": "inband", "toxic": "disabled", "target": ", ".join(self.links)}
