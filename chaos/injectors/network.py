"""Network faults through Toxiproxy's REST API (the ``toxiproxy-python`` client): a toxic on a data
channel or the coordinator link, or a whole link disabled. Works unchanged against Shopify's server
or statechaos's own compatible proxy."""

from __future__ import annotations

import itertools
from typing import Any

from chaos.injectors.base import Injector, InjectorError

__all__ = ["ToxicFault", "DisableLink"]

_ids = itertools.count(1)


class ToxicFault(Injector):
    """Add one toxic (latency, jitter, bandwidth, slow_close, timeout, reset_peer, slicer, limit_data) to a
    run-owned proxy; remove it on ``stop``. ``jitter`` is Toxiproxy's latency toxic with a jitter attribute."""

    kind = "network"

    def __init__(
        self,
        proxy: Any,
        toxic: str,
        attributes: dict[str, Any] | None = None,
        stream: str = "downstream",
        toxicity: float = 1.0,
        run_id: str = "",
    ) -> None:
        self.proxy, self.toxic, self.stream, self.toxicity = proxy, toxic, stream, toxicity
        self.attributes = dict(attributes or {})
        self.type = "latency" if toxic == "jitter" else toxic
        if toxic == "jitter":
            self.attributes.setdefault("latency", 0)
            self.attributes.setdefault("jitter", 100)
        self.name = f"statechaos-{run_id}-{self.type}-{next(_ids)}"
        self._added = False

    def start(self) -> None:
        if not self.proxy.name.startswith("statechaos-"):
            from chaos.scope import BlastRadiusError

            raise BlastRadiusError(
                f"refusing to add a toxic to proxy {self.proxy.name!r}: not a statechaos run's proxy"
            )
        try:
            self.proxy.add_toxic(
                name=self.name,
                type=self.type,
                stream=self.stream,
                toxicity=self.toxicity,
                attributes=self.attributes,
            )
        except Exception as e:
            raise InjectorError(f"adding {self.type} toxic to proxy {self.proxy.name}: {e}") from e
        self._added = True

    def stop(self) -> None:
        if self._added:
            self._added = False
            try:
                self.proxy.destroy_toxic(self.name)
            except Exception as e:
                raise InjectorError(f"removing toxic {self.name} from proxy {self.proxy.name}: {e}") from e

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "toxic": self.toxic,
            "target": self.proxy.name,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": self.attributes,
        }


class DisableLink(Injector):
    """Cut a link completely: disable its proxy (existing connections close, new ones are refused)."""

    kind = "network"

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self._disabled = False

    def start(self) -> None:
        if not self.proxy.name.startswith("statechaos-"):
            from chaos.scope import BlastRadiusError

            raise BlastRadiusError(
                f"refusing to disable proxy {self.proxy.name!r}: not a statechaos run's proxy"
            )
        self.proxy.disable()
        self._disabled = True

    def stop(self) -> None:
        if self._disabled:
            self._disabled = False
            self.proxy.enable()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "toxic": "disabled", "target": self.proxy.name}
