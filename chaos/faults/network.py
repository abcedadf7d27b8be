"""``network``: a Toxiproxy toxic (latency, bandwidth, reset_peer, ...) or ``disable`` on the data
channels or coordinator links ``channel`` names, delivered ``via`` the run's own Toxiproxy proxies
(``chaos.injectors.network``) or in band, by the runtime's transport itself
(``chaos.injectors.inband_network``). Same toxics, attributes and semantics either way; the default is
in band on a ``spark://`` master (no proxy can sit next to links between other hosts), the proxy
elsewhere. Spark clusters (the simulator has no sockets)."""

from __future__ import annotations

import random
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from chaos.errors import EnvironmentProblem
from chaos.faults.params import FaultParams
from chaos.faults.registry import SPARK_CLUSTERS, FaultKind, FaultTarget, SssFacts, SssTarget, register
from chaos.injectors.base import Injector, InjectorError, NotReady
from chaos.injectors.inband_network import InbandCut, InbandToxic
from chaos.injectors.network import DisableLink, ToxicFault
from harness.driver.controls import InbandControls
from harness.job.job_graph import ChannelName
from harness.toxics.kinds import check_attributes

__all__ = ["NetworkFault", "TOXICS", "network_link", "delivery"]

TOXICS = (
    "latency",
    "jitter",
    "bandwidth",
    "slow_close",
    "timeout",
    "reset_peer",
    "slicer",
    "limit_data",
    "disable",
)


class NetworkFault(FaultParams):
    kind: Literal["network"]
    channel: str | None = None  # "source[0]->count[1]", "coordinator" or "coordinator:task"
    toxic: str | None = None
    attributes: dict[str, int | float] = Field(default_factory=dict)  # the toxic's attributes
    toxicity: Annotated[float, Field(ge=0, le=1)] = 1.0
    # Toxiproxy direction; none = the way records flow (a data channel: upstream, from the sending task
    # to the receiving one; the coordinator link: downstream, the driver's triggers to a task)
    stream: Literal["upstream", "downstream"] | None = None
    # how the toxic reaches the link: a Toxiproxy proxy, or the runtime's in-band layer; none: see delivery
    via: Literal["proxy", "inband"] | None = None

    @model_validator(mode="after")
    def _needs(self) -> NetworkFault:
        if self.toxic not in TOXICS:
            raise ValueError(f"network faults need toxic: one of {', '.join(TOXICS)}")
        if self.toxic == "disable" and self.attributes:
            raise ValueError(f"toxic disable takes no attributes, got {', '.join(self.attributes)}")
        if self.toxic != "disable":
            check_attributes("latency" if self.toxic == "jitter" else self.toxic, self.attributes)
        return self


def network_link(channel: str | None) -> str:
    """The link a network fault's ``channel`` names: ``"up->down"`` a data channel, ``"coordinator"``
    every task's coordinator link, ``"coordinator:task"`` one of them; none: every data channel (one
    is picked when the fault starts). A trailing ``:`` marks a prefix."""
    from harness.spark.network import coordinator_link

    if channel is None:
        return "data:"
    if channel == "coordinator":
        return "coord:"
    if channel.startswith("coordinator:"):
        return coordinator_link(channel.removeprefix("coordinator:"))
    if "->" not in channel:
        raise EnvironmentProblem(
            f"network fault channel {channel!r}: expected 'up[i]->down[j]', 'coordinator' or 'coordinator:task'"
        )
    return f"data:{channel}"


def delivery(f: NetworkFault, cluster_kind: str) -> str:
    """``proxy`` or ``inband``: the fault's ``via``, else in band on a spark:// master, else the proxy."""
    return f.via or ("inband" if cluster_kind == "spark" else "proxy")


def _stream(f: NetworkFault, link: str) -> str:
    """The fault's ``stream``; none: the way records flow (a data channel: upstream, from the sending task
    to the receiving one; a coordinator link: downstream, the driver's triggers to a task)."""
    return f.stream or ("upstream" if link.startswith("data:") else "downstream")


def _inband(f: NetworkFault, on: FaultTarget, link: str, rng: random.Random) -> Injector:
    from harness.spark.network import coordinator_link, data_link

    ex = on.executor
    if not isinstance(ex, InbandControls):
        raise InjectorError(
            "in-band network faults need an executor whose tasks take control messages (Spark)"
        )
    live = [data_link(*ChannelName.parse(c)) for c in ex.channel_names()]
    live += [coordinator_link(t) for t in ex.task_names()]
    links = [x for x in live if x == link or (link.endswith(":") and x.startswith(link))]
    if link == "data:" and links:
        links = [rng.choice(links)]
    if not links:
        raise NotReady(f"no link of the run matches {f.channel or 'a data channel'!r}")
    if f.toxic == "disable":
        return InbandCut(ex.tell, links)
    stream = _stream(f, link)
    return InbandToxic(ex.tell, links, str(f.toxic), dict(f.attributes), stream, f.toxicity, on.scope.run_id)


def injector(f: NetworkFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    link = network_link(f.channel)
    if delivery(f, on.cluster_kind) == "inband":
        return _inband(f, on, link, rng)
    assert on.router is not None, "a run with network faults via proxy routes its links through proxies"
    proxies = on.router.proxies_for(link)
    if link == "data:" and proxies:
        proxies = [rng.choice(proxies)]
    if not proxies:
        live = ", ".join(sorted(on.router.proxies)) or "none yet"
        raise NotReady(f"no live proxied link matches {f.channel or 'a data channel'!r} (proxied: {live})")
    if f.toxic == "disable":
        return DisableLink(proxies)
    return ToxicFault(
        proxies, str(f.toxic), dict(f.attributes), _stream(f, link), f.toxicity, on.scope.run_id
    )


def sss_injector(f: Any, on: SssTarget, rng: random.Random) -> Injector:
    """On a Structured Streaming query: a toxic (or ``disable``) on the driver's proxied link."""
    if on.link is None:
        raise InjectorError("network faults need the driver's proxies: cluster docker")
    if f.toxic == "disable":
        return DisableLink(on.link.proxies)
    return ToxicFault(on.link.proxies, f.toxic, dict(f.attributes), f.stream, 1.0, on.scope.run_id)


def sss_check(f: Any) -> tuple[str, str] | None:
    """A query's network fault names its toxic (the query's entries have no ``toxic`` default)."""
    if f.toxic not in TOXICS:
        return "toxic", f"a network fault needs toxic: one of {', '.join(TOXICS)}"
    return None


register(
    FaultKind(
        NetworkFault, SPARK_CLUSTERS, injector, targets="channel", deliveries=("inband", "out_of_band"),
        sss=SssFacts(("docker",), sss_injector, options=("toxic", "attributes", "stream"), check=sss_check,
                     link=True),
    )
)  # fmt: skip
