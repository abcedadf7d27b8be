"""Container faults through the Docker SDK: kill, stop, restart, pause a worker; partition it from
the network. Every action first checks the container carries the run's compose project label."""

from __future__ import annotations

from typing import Any

from chaos.injectors.base import Injector, InjectorError
from chaos.scope import RunScope

__all__ = ["ContainerFault", "PartitionContainer"]


class ContainerFault(Injector):
    """A Docker SDK call on a worker container (``action``: kill, stop, restart, pause), undone on
    ``stop`` by ``heal`` (start, unpause; None: instant, nothing to undo). The fault kind's module
    (:mod:`chaos.faults.workers`) says which call each kind makes."""

    def __init__(self, scope: RunScope, container: Any, kind: str, action: str, heal: str | None) -> None:
        self.scope, self.container, self.kind = scope, container, kind
        self._action, self._heal = action, heal
        self.instant = heal is None
        self._active = False

    def start(self) -> None:
        self.scope.check_container(self.container)
        action = self._action
        try:
            if action == "stop":
                self.container.stop(timeout=1)
            elif action == "restart":
                self.container.restart(timeout=1)
            else:
                getattr(self.container, action)()
        except Exception as e:  # docker.errors.APIError and friends
            raise InjectorError(f"{self.kind} on container {self.container.name}: {e}") from e
        self._active = True

    def stop(self) -> None:
        heal = self._heal
        if heal and self._active:
            self._active = False
            try:
                getattr(self.container, heal)()
            except Exception as e:
                raise InjectorError(f"healing {self.kind} on container {self.container.name}: {e}") from e

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.container.name}


class PartitionContainer(Injector):
    """Disconnect a container from the run's network; reconnect it (same aliases) on ``stop``."""

    def __init__(self, scope: RunScope, container: Any, network: Any, kind: str) -> None:
        self.scope, self.container, self.network, self.kind = scope, container, network, kind
        self._aliases: list[str] | None = None

    def start(self) -> None:
        self.scope.check_container(self.container)
        self.scope.check_container(self.network.attrs.get("Labels") or {})
        self.container.reload()
        nets = self.container.attrs["NetworkSettings"]["Networks"]
        self._aliases = (nets.get(self.network.name) or {}).get("Aliases") or []
        try:
            self.network.disconnect(self.container, force=True)
        except Exception as e:
            raise InjectorError(f"partitioning {self.container.name} from {self.network.name}: {e}") from e

    def stop(self) -> None:
        if self._aliases is None:
            return
        aliases, self._aliases = self._aliases, None
        try:
            self.network.connect(self.container, aliases=aliases)
        except Exception as e:
            raise InjectorError(f"reconnecting {self.container.name} to {self.network.name}: {e}") from e

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.container.name, "network": self.network.name}
