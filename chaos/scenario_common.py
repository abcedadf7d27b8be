"""The parts of a scenario every engine shares (:class:`ScenarioCommon`), the base of the one scenario
model :class:`chaos.scenario.Scenario`, whose engine's own fields are its ``part``
(:class:`chaos.scenario.RuntimePart`, :class:`chaos.sss.scenario.SssPart`). Its own module so that an
engine's part checks the common fields without importing the model that holds it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, PrivateAttr, field_validator

from chaos.trigger import Strict
from harness.engines import ALIASES

__all__ = ["ScenarioCommon"]


class ScenarioCommon(Strict):
    """What every scenario has, whatever its engine (``engine``): its name and description, the cluster
    it runs on, its seed, and the limits of its run. The engine's own fields are the scenario's part:
    the runtime's (a job, parallelism, checkpoints, faults, rescale steps) or a Structured Streaming
    query's (a query, its input, its faults, its sink); the same file format, errors
    (``file:line: field: problem``) and front ends for both."""

    # first: the cluster's check (each engine has its own clusters) reads it
    engine: Literal["runtime", "structured_streaming"] = "runtime"
    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    cluster: str = "local"  # each engine checks its own clusters, and has its own default
    seed: int = 0
    # the run is stuck when nothing it waits for progressed for this long; slow is not stuck
    stall_limit_s: Annotated[float, Field(gt=0)] = 120
    # an optional ceiling on the whole run: for a CI budget, not for catching hangs (that is stall_limit_s)
    timeout_s: Annotated[float, Field(gt=0)] | None = None
    # where the scenario's own modules (a job's, a query's) are looked up first: the file's folder
    _base_dir: Path | None = PrivateAttr(default=None)

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_alias(cls, v: Any) -> Any:
        return ALIASES.get(v, v) if isinstance(v, str) else v

    @property
    def base_dir(self) -> Path | None:
        return self._base_dir

    def located(self, base_dir: Path | None) -> Self:
        """This scenario, looking up its modules in ``base_dir`` first."""
        self._base_dir = base_dir
        return self

    @property
    def cluster_kind(self) -> str:
        """sim, local, docker or spark (any spark:// master)."""
        if self.cluster.startswith("spark://"):
            return "spark"
        if self.cluster.startswith("local-cluster"):
            return "local"
        return self.cluster
