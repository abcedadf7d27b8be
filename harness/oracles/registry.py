"""The oracle registry: each oracle registers itself on the last line of its module, with the type of
its config (a dataclass whose fields the check takes as keyword arguments), so adding an oracle
touches no other file and the runner needs no per-oracle special cases.

Oracles are registered per engine, the system under test they judge: ``runtime`` (statechaos's own
dataflow runtime, the default) and ``structured_streaming`` (a Spark Structured Streaming query,
:mod:`harness.sss.verdicts`). The same check name (``exactly_once``, ``liveness``) may mean each
engine's own check: the verdicts read alike whatever ran."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.engines import ENGINES, RUNTIME
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.verdict import Verdict

__all__ = ["Oracle", "ORACLES", "register_oracle", "oracles_for"]

@dataclass(frozen=True)
class Oracle:
    name: str
    check: Callable[..., Verdict]
    config: type[Any] | None = None  # a dataclass; None: the oracle takes no settings

    def run(self, art: RunArtifacts, spec: JobSpec | None, config: Any = None) -> Verdict:
        """``spec``: the runtime job the run ran (None for an engine without one: its config says what ran)."""
        if self.config is None:
            return self.check(art, spec)
        if config is None:
            config = self.config()
        if not isinstance(config, self.config):
            raise TypeError(f"oracle {self.name!r} takes a {self.config.__name__}, got {config!r}")
        # the config's fields as they are (a nested dataclass stays an object, unlike asdict)
        return self.check(art, spec, **{f.name: getattr(config, f.name) for f in dataclasses.fields(config)})


_BY_ENGINE: dict[str, dict[str, Oracle]] = {engine: {} for engine in ENGINES}
ORACLES: dict[str, Oracle] = _BY_ENGINE[RUNTIME]  # the runtime's, by name


def oracles_for(engine: str) -> dict[str, Oracle]:
    """The oracles registered for ``engine``, by name."""
    if engine not in _BY_ENGINE:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    return _BY_ENGINE[engine]


def register_oracle(name: str, check: Callable[..., Verdict], config: type | None = None,
                    engine: str = RUNTIME) -> None:  # fmt: skip
    registered = oracles_for(engine)
    if name in registered and registered[name].check is not check:
        raise ValueError(f"oracle {name!r} is registered twice for engine {engine}")
    registered[name] = Oracle(name, check, config)
