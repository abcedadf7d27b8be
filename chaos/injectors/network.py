"""Network faults through Toxiproxy's REST API (the ``toxiproxy-python`` client): a toxic on a data
channel or the coordinator link, or a whole link disabled. Works unchanged against Shopify's server
or statechaos's own compatible proxy."""

from __future__ import annotations

import itertools
import re
import threading
from typing import Any

from chaos.injectors.base import Injector, InjectorError

__all__ = ["ToxicFault", "DisableLink", "ProxyRouter", "toxic_request"]

_ids = itertools.count(1)


def toxic_request(
    toxic: str, attributes: dict[str, Any] | None, run_id: str
) -> tuple[str, str, dict[str, Any]]:
    """A scenario's toxic as Toxiproxy takes it, through a proxy or in band: its run-owned name, its type
    (``jitter`` is a latency toxic with a jitter, 100 ms unless given) and its attributes (integers:
    a JSON 300.0 is refused where 300 is taken)."""
    attrs = {
        k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in (attributes or {}).items()
    }
    typ = "latency" if toxic == "jitter" else toxic
    if toxic == "jitter":
        attrs.setdefault("latency", 0)
        attrs.setdefault("jitter", 100)
    return f"statechaos-{run_id}-{typ}-{next(_ids)}", typ, attrs


def _as_list(proxy: Any) -> list[Any]:
    return list(proxy) if isinstance(proxy, list | tuple) else [proxy]


def _owned(proxies: list[Any], what: str) -> None:
    for p in proxies:
        if not p.name.startswith("statechaos-"):
            from chaos.scope import BlastRadiusError

            raise BlastRadiusError(f"refusing to {what} proxy {p.name!r}: not a statechaos run's proxy")


class ProxyRouter:
    """Puts a run-owned Toxiproxy proxy in front of the links a run's faults name, so toxics can act on
    them. Given to the Spark executor as its router: asked for a link's real endpoint, it creates the
    proxy (or points an existing one, with its toxics, at the new endpoint after a redeployment) and
    hands out the proxy's. Links no fault names go direct: every proxied byte costs a hop.

    ``listen_host`` is where the proxy server listens; ``advertise_host`` what tasks dial (a container
    name when the proxy runs in the compose stack)."""

    def __init__(
        self,
        client: Any,
        run_id: str,
        links: set[str] | None,
        listen_host: str = "127.0.0.1",
        advertise_host: str | None = None,
    ) -> None:
        self.client, self.links = client, links  # links=None: proxy every link
        self.run_id = re.sub(r"[^A-Za-z0-9_.-]", "-", run_id)
        self.listen_host, self.advertise_host = listen_host, advertise_host or listen_host
        self.proxies: dict[str, Any] = {}
        self._lock = threading.Lock()

    def proxy_name(self, link: str) -> str:
        return f"statechaos-{self.run_id}-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", link).strip("-")

    def wants(self, link: str) -> bool:
        return self.links is None or link in self.links

    def route(self, link: str, real: tuple[str, int]) -> tuple[str, int]:
        if not self.wants(link):
            return real
        upstream = f"{real[0]}:{real[1]}"
        with self._lock:
            p = self.proxies.get(link)
            try:
                if p is None:
                    p = self.client.create(
                        upstream=upstream, name=self.proxy_name(link), listen=f"{self.listen_host}:0"
                    )
                    self.proxies[link] = p
                elif p.upstream != upstream:
                    from toxiproxy.api import APIConsumer

                    APIConsumer.post(f"/proxies/{p.name}", json={"upstream": upstream})
                    p.upstream = upstream
            except Exception as e:
                raise InjectorError(f"creating proxy for {link} -> {upstream}: {e}") from e
        return (self.advertise_host, int(str(p.listen).rsplit(":", 1)[1]))

    def proxies_for(self, link_prefix: str) -> list[Any]:
        """The live proxies whose link equals, or starts with, ``link_prefix`` (``coord:`` = all)."""
        with self._lock:
            return [
                p for k, p in sorted(self.proxies.items()) if k == link_prefix or k.startswith(link_prefix)
            ]

    def close(self) -> None:
        """Remove every proxy this run created."""
        with self._lock:
            proxies, self.proxies = list(self.proxies.values()), {}
        for p in proxies:
            try:
                p.destroy()
            except Exception:
                pass


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
        self.proxies = _as_list(proxy)
        self.toxic, self.stream, self.toxicity = toxic, stream, toxicity
        self.name, self.type, self.attributes = toxic_request(toxic, attributes, run_id)
        self._added = False

    def start(self) -> None:
        _owned(self.proxies, "add a toxic to")
        self._added = True
        for p in self.proxies:
            try:
                p.add_toxic(
                    name=self.name,
                    type=self.type,
                    stream=self.stream,
                    toxicity=self.toxicity,
                    attributes=self.attributes,
                )
            except Exception as e:
                raise InjectorError(f"adding {self.type} toxic to proxy {p.name}: {e}") from e

    def stop(self) -> None:
        if self._added:
            self._added = False
            errors = []
            for p in self.proxies:
                try:
                    p.destroy_toxic(self.name)
                except Exception as e:
                    errors.append(f"removing toxic {self.name} from proxy {p.name}: {e}")
            if errors:
                raise InjectorError("; ".join(errors))

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "via": "proxy",
            "toxic": self.toxic,
            "target": ", ".join(p.name for p in self.proxies),
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": self.attributes,
        }


class DisableLink(Injector):
    """Cut a link completely: disable its proxy (existing connections close, new ones are refused)."""

    kind = "network"

    def __init__(self, proxy: Any) -> None:
        self.proxies = _as_list(proxy)
        self._disabled = False

    def start(self) -> None:
        _owned(self.proxies, "disable")
        self._disabled = True
        for p in self.proxies:
            p.disable()

    def stop(self) -> None:
        if self._disabled:
            self._disabled = False
            for p in self.proxies:
                p.enable()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "via": "proxy",
            "toxic": "disabled",
            "target": ", ".join(p.name for p in self.proxies),
        }
