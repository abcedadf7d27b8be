"""The oracle registry: each oracle registers itself on the last line of its module, with the type of
its config (a dataclass whose fields the check takes as keyword arguments), so adding an oracle
touches no other file and the runner needs no per-oracle special cases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.verdict import Verdict

__all__ = ["Oracle", "ORACLES", "register_oracle"]


@dataclass(frozen=True)
class Oracle:
    name: str
    check: Callable[..., Verdict]
    config: type[Any] | None = None  # a dataclass; None: the oracle takes no settings

    def run(self, art: RunArtifacts, spec: JobSpec, config: Any = None) -> Verdict:
        if self.config is None:
            return self.check(art, spec)
        if config is None:
            config = self.config()
        if not isinstance(config, self.config):
            raise TypeError(f"oracle {self.name!r} takes a {self.config.__name__}, got {config!r}")
        return self.check(art, spec, **asdict(config))


ORACLES: dict[str, Oracle] = {}


def register_oracle(name: str, check: Callable[..., Verdict], config: type | None = None) -> None:
    if name in ORACLES and ORACLES[name].check is not check:
        raise ValueError(f"oracle {name!r} is registered twice")
    ORACLES[name] = Oracle(name, check, config)
