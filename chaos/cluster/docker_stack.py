"""The dockerised Spark standalone cluster of one run: ``compose/docker-compose.yml`` under a compose
project name that is the run's own.

Everything the stack creates (containers, the network, the checkpoint volume) carries the label
``io.statechaos.project=<project>``. Cleanup selects on that label with the Docker SDK, so it also
removes what a run killed with SIGKILL left behind: ``up()`` sweeps leftovers of its project first,
``down()`` sweeps again after ``docker-compose down``. Up and down go through the compose CLI (v1
``docker-compose`` or the v2 ``docker compose`` plugin, whichever exists); inspection, exec and
cleanup go through the SDK.

The harness driver runs inside the ``spark-driver`` container on the stack's network (executors must
connect back to the driver, and container addresses are not routable from every host): use
:meth:`DockerStack.run_in_driver`. Inside the network the master is ``spark://spark-master:7077``,
the driver host is ``spark-driver``, the proxy API is ``http://toxiproxy:8474`` and the checkpoint
volume is ``/checkpoints`` in every container.

Usage::

    with DockerStack("run-42", workers=2) as stack:   # up + wait_healthy; down on exit, error or signal
        code, out = stack.run_in_driver(["python", "-c", "..."])

One module although long: compose up/down, the label sweep and the owner check are the lifecycle
of one resource, the run's stack.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from chaos.scope import PROJECT_LABEL
from reference_impl.errors import EnvironmentFault

__all__ = [
    "COMPOSE_DIR",
    "ROLE_LABEL",
    "DockerStack",
    "DockerStackError",
    "OWNER_LABEL",
    "build_progress",
    "build_images",
    "code_volumes",
    "compose_command",
    "docker_client",
]

COMPOSE_DIR = Path(__file__).resolve().parents[2] / "compose"
ROLE_LABEL = "io.statechaos.role"
OWNER_LABEL = "io.statechaos.owner"
DEFAULT_IMAGE = "statechaos/spark:latest"
# compose service -> role label value
SERVICES = {
    "spark-master": "master",
    "spark-worker": "worker",
    "spark-driver": "driver",
    "toxiproxy": "proxy",
}
# Compose v1 silently rewrites other project names (lowercases, drops characters), which would make
# the label and compose's own project name disagree; refuse them instead.
_PROJECT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class DockerStackError(EnvironmentFault, RuntimeError):
    """The stack could not be built, started, made healthy or removed; the message says why."""


def docker_client() -> Any:
    """A Docker SDK client that negotiates the API version (the engine here speaks 1.41, older than
    the SDK's default), or :class:`DockerStackError` when no engine is reachable. Refused (a
    ``RuntimeError``, never a skip) where ``STATECHAOS_NO_DOCKER`` is set, as the test suite does for
    every test not marked ``docker``."""
    refused = os.environ.get("STATECHAOS_NO_DOCKER")
    if refused:
        raise RuntimeError(f"Docker may not be used here (STATECHAOS_NO_DOCKER is set): {refused}")
    try:
        import docker

        client = docker.from_env(version="auto", timeout=120)
        client.ping()
        return client
    except Exception as e:
        raise DockerStackError(f"no Docker engine reachable: {e}") from e


# where every container finds the project's code (compose/image/statechaos-src.pth puts it on the path)
CODE_DIR = "/opt/statechaos/src"


def code_volumes() -> dict[str, dict[str, str]]:
    """The project's code as ``docker-compose.yml`` mounts it into every container (its ``x-node``
    volumes under :data:`CODE_DIR`), as Docker SDK ``volumes`` for a container started without
    compose: the images hold only the dependencies."""
    import yaml

    doc = yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text())
    out: dict[str, dict[str, str]] = {}
    for item in doc["x-node"]["volumes"]:
        host, target, *mode = str(item).split(":")
        if target.startswith(CODE_DIR + "/"):
            out[str((COMPOSE_DIR / host).resolve())] = {"bind": target, "mode": mode[0] if mode else "rw"}
    return out


def compose_command() -> list[str]:
    """The compose CLI to call: ``docker-compose`` (v1 or v2 standalone) or the ``docker compose`` plugin."""
    exe = shutil.which("docker-compose")
    if exe:
        return [exe]
    docker_exe = shutil.which("docker")
    if docker_exe:
        probe = subprocess.run([docker_exe, "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return [docker_exe, "compose"]
    raise DockerStackError("neither docker-compose nor the `docker compose` plugin is installed")


def build_progress() -> tuple[tuple[str, int], ...]:
    """The files ``compose/build-images.sh`` writes under its cache (``CACHE``) while it builds, with
    their sizes: debootstrap's log and the rootfs tarball, the wheelhouse and pip's log. A progress
    signal for whoever waits for a build besides its own output (the rootfs itself is not walked: it
    has /proc and /sys mounted while debootstrap runs)."""
    cache = Path(
        os.environ.get("STATECHAOS_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "statechaos"
    )
    files = [*cache.glob("rootfs/work.*/debootstrap.log"), *cache.glob("rootfs/*.tar.gz*"), *cache.glob("wheels/*"),
             *cache.glob("wheels/*/*")]  # fmt: skip
    sizes = []
    for f in files:
        with contextlib.suppress(OSError):
            sizes.append((f.name, f.stat().st_size))
    return tuple(sorted(sizes))


def build_images(*, check_only: bool = False, timeout: float = 3600) -> str:
    """Run ``compose/build-images.sh`` and return the image reference it built (or found).

    With ``check_only`` nothing is built: :class:`DockerStackError` if the image is missing."""
    script = COMPOSE_DIR / "build-images.sh"
    args = ["bash", str(script)] + (["--check"] if check_only else [])
    try:
        proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise DockerStackError(f"{script} did not finish within {timeout:.0f} s") from e
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        what = "images are not built" if check_only and proc.returncode == 3 else "image build failed"
        raise DockerStackError(f"{what}: {script} exited {proc.returncode} (its progress is on stderr)")
    return lines[-1]


def owner_token(pid: int | None = None) -> str:
    """``host/pid/start-time`` of a process (default: this one), the value of the owner label.

    The start time tells a dead owner from a new process that reuses its pid."""
    import socket

    import psutil

    p = psutil.Process(pid)
    return f"{socket.gethostname()}/{p.pid}/{int(p.create_time())}"


def _owner_alive(token: str) -> bool:
    """Whether the process named by an owner label still runs. Owners on other hosts count as alive
    (their pids mean nothing here), and so do unreadable tokens: when in doubt, leave it."""
    import socket

    import psutil

    try:
        host, pid, started = token.split("/")
        if host != socket.gethostname():
            return True
        return int(psutil.Process(int(pid)).create_time()) == int(started)
    except psutil.NoSuchProcess:
        return False
    except (ValueError, psutil.Error):
        return True


def sweep_dead_owners(client: Any | None = None) -> list[str]:
    """Remove the stacks of runs that died without cleaning up (SIGKILL): every container, network
    and volume whose owner label names a process of this host that no longer runs. Stacks started by
    hand (no owner) and stacks of live runs are left alone. Returns the projects removed."""
    client = client or docker_client()
    dead: set[str] = set()
    objects = [
        *client.containers.list(all=True, filters={"label": [PROJECT_LABEL, OWNER_LABEL]}, ignore_removed=True),
        *client.networks.list(filters={"label": [PROJECT_LABEL, OWNER_LABEL]}),
        *client.volumes.list(filters={"label": [PROJECT_LABEL, OWNER_LABEL]}),
    ]
    for obj in objects:
        labels = obj.attrs.get("Labels") or obj.attrs.get("Config", {}).get("Labels") or {}
        token, project = labels.get(OWNER_LABEL), labels.get(PROJECT_LABEL)
        if token and project and _PROJECT_RE.match(project) and not _owner_alive(token):
            dead.add(project)
    for project in sorted(dead):
        DockerStack(project, client=client).sweep()
    return sorted(dead)


class DockerStack:
    """One run's compose stack: master, ``workers`` workers, the driver and (optionally) the proxy.

    ``project`` is the compose project name and the value of the ``io.statechaos.project`` label; it
    must be unique per concurrent run. ``image`` defaults to ``statechaos/spark:latest`` (what
    ``compose/build-images.sh`` tags last). ``proxy=False`` leaves the Toxiproxy service out,
    ``driver=False`` the driver container. ``worker_cores`` is each worker's task slots; ``mounts``
    are host directories bind-mounted at the same path into workers and driver; ``owner`` (see
    :func:`owner_token`) lets a later run remove this stack if its owner dies without cleaning up."""

    def __init__(
        self,
        project: str,
        workers: int = 2,
        *,
        image: str | None = None,
        proxy: bool = True,
        driver: bool = True,
        compose_file: Path | str | None = None,
        client: Any | None = None,
        worker_cores: int = 1,
        mounts: Sequence[Path | str] = (),
        owner: str | None = None,
    ) -> None:
        if not _PROJECT_RE.match(project):
            raise ValueError(
                f"compose project name {project!r} must be lowercase letters, digits, '-' or '_', "
                "starting with a letter or digit, at most 63 characters"
            )
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.project = project
        self.workers = workers
        self.image = image or DEFAULT_IMAGE
        self.proxy = proxy
        self.driver = driver  # False: the driver runs elsewhere (on the host), no idle driver container
        self.compose_file = Path(compose_file) if compose_file else COMPOSE_DIR / "docker-compose.yml"
        if not self.compose_file.is_file():
            raise DockerStackError(f"compose file {self.compose_file} does not exist")
        if worker_cores < 1:
            raise ValueError(f"worker_cores must be >= 1, got {worker_cores}")
        self.worker_cores = worker_cores
        # host directories bind-mounted at the same path into workers and driver (a host driver's run
        # directory: executors write checkpoints and output where the driver reads them)
        self.mounts = [Path(m).resolve() for m in mounts]
        self.owner = owner
        self._override: Path | None = None
        self._client = client
        self._saved_handlers: dict[int, Any] = {}

    # ---- addresses, as seen from inside the stack's network ---------------------------------------
    master_url = "spark://spark-master:7077"
    driver_host = "spark-driver"
    proxy_api = "http://toxiproxy:8474"
    checkpoint_dir = "/checkpoints"

    @property
    def client(self) -> Any:
        """The Docker SDK client (created on first use)."""
        if self._client is None:
            self._client = docker_client()
        return self._client

    @property
    def label(self) -> str:
        """The ``key=value`` label filter that selects everything of this run."""
        return f"{PROJECT_LABEL}={self.project}"

    @property
    def services(self) -> list[str]:
        names = ["spark-master", "spark-worker"] + (["spark-driver"] if self.driver else [])
        return names + (["toxiproxy"] if self.proxy else [])

    # ---- compose CLI -------------------------------------------------------------------------------
    def _compose(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = dict(
            os.environ,
            COMPOSE_PROJECT_NAME=self.project,
            STATECHAOS_IMAGE=self.image,
            STATECHAOS_WORKER_CORES=str(self.worker_cores),
            STATECHAOS_OWNER=self.owner or "",
        )
        files = ["-f", str(self.compose_file)]
        override = self._override_file()
        if override is not None:
            files += ["-f", str(override)]
        cmd = [
            *compose_command(),
            *files,
            "-p",
            self.project,
            "--project-directory",
            str(self.compose_file.parent),
            *args,
        ]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise DockerStackError(f"`{' '.join(cmd)}` did not finish within {timeout:.0f} s") from e
        if check and proc.returncode != 0:
            raise DockerStackError(
                f"`{' '.join(cmd)}` exited {proc.returncode}:\n{(proc.stderr or proc.stdout)[-4000:]}"
            )
        return proc

    def _override_file(self) -> Path | None:
        """A compose override adding ``mounts`` to workers and driver (written once, removed by ``down``)."""
        if not self.mounts:
            return None
        if self._override is None or not self._override.is_file():
            import json
            import tempfile

            binds = [f"{m}:{m}" for m in self.mounts]
            doc = {
                "version": "2.4",
                "services": {s: {"volumes": binds} for s in ("spark-worker", "spark-driver")},
            }
            fd, name = tempfile.mkstemp(prefix=f"statechaos-{self.project}-", suffix=".yml")
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)  # JSON is YAML
            self._override = Path(name)
        return self._override

    # ---- lifecycle ---------------------------------------------------------------------------------
    def up(self, timeout: float = 300) -> DockerStack:
        """Remove leftovers of this project (by label), then start the stack detached.

        Does not wait for health beyond what compose does (it waits for the master before starting
        workers and driver); call :meth:`wait_healthy` for that."""
        try:
            self.client.images.get(self.image)
        except Exception as e:
            raise DockerStackError(
                f"image {self.image} is missing: build it with compose/build-images.sh ({e})"
            ) from e
        self.sweep()
        self._compose(
            "up",
            "-d",
            "--no-build",
            "--remove-orphans",
            "--scale",
            f"spark-worker={self.workers}",
            *self.services,
            timeout=timeout,
        )
        return self

    def wait_healthy(self, timeout: float = 180) -> float:
        """Wait until every container of the stack reports healthy and ``workers`` workers run.

        Returns the seconds waited. Fails only when no container's state or health changed, and no
        container not yet healthy wrote a log line, for ``timeout`` seconds (a loaded host starts
        them slowly, not never: a worker JVM logging its start-up is progressing, though its health
        stays "starting" for minutes), or fast, with the container's last log lines, when one exits."""
        from harness.progress import ProgressWatch

        start = time.monotonic()
        watch = ProgressWatch(timeout)
        expected = {SERVICES[s]: (self.workers if s == "spark-worker" else 1) for s in self.services}
        status: dict[str, str] = {}
        while True:
            status = {}
            logged: dict[str, int] = {}  # bytes logged by each container not healthy yet
            counts = dict.fromkeys(expected, 0)
            for c in self.containers(all=True):
                role = c.labels.get(ROLE_LABEL, "?")
                state = c.attrs.get("State", {})
                health = (state.get("Health") or {}).get("Status", "none")
                status[c.name] = f"{state.get('Status')}/{health}"
                if state.get("Status") in ("exited", "dead"):
                    raise DockerStackError(
                        f"container {c.name} ({role}) exited with code {state.get('ExitCode')}; last log lines:\n"
                        + self._tail(c)
                    )
                if state.get("Status") == "running" and health == "healthy" and role in counts:
                    counts[role] += 1
                elif state.get("Status") == "running":
                    with contextlib.suppress(Exception):  # gone meanwhile: its state says so next time
                        logged[c.name] = len(c.logs())
            if all(counts[r] >= n for r, n in expected.items()):
                return time.monotonic() - start
            watch.observe(states=tuple(sorted(status.items())), logged=tuple(sorted(logged.items())))
            if (stalled := watch.stalled()) is not None:
                unhealthy = [
                    c for c in self.containers() if "healthy" not in status.get(c.name, "/").split("/")[1:]
                ]
                logs = "\n".join(f"--- {c.name}\n{self._tail(c)}" for c in unhealthy[:3])
                raise DockerStackError(
                    f"stack {self.project} not healthy, {stalled}: "
                    f"{status or 'no containers'}; expected {expected}\n{logs}"
                )
            time.sleep(1)

    def down(self, timeout: float = 120) -> None:
        """Remove the run's containers, network and volumes: ``compose down -v``, then a label sweep.

        SIGINT/SIGTERM are held off while it runs, so a second Ctrl-C cannot leave half a stack."""
        with _signals_deferred():
            try:
                self._compose("down", "-v", "--remove-orphans", "-t", "3", timeout=timeout, check=False)
            finally:
                self.sweep()
                if self._override is not None:
                    self._override.unlink(missing_ok=True)
                    self._override = None
        left = self.leftovers()
        if any(left.values()):
            raise DockerStackError(f"stack {self.project} left resources behind: {left}")

    def sweep(self) -> dict[str, int]:
        """Force-remove every container, network and volume labelled with this project.

        Needs no compose file and no state: it is how a run cleans up after a predecessor that was
        killed. Returns how many of each it removed."""
        import docker.errors

        removed = {"containers": 0, "networks": 0, "volumes": 0}
        flt = {"label": self.label}
        for c in self.client.containers.list(all=True, filters=flt, ignore_removed=True):
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True, v=True)
                removed["containers"] += 1
        for n in self.client.networks.list(filters=flt):
            with contextlib.suppress(docker.errors.NotFound):
                n.remove()
                removed["networks"] += 1
        for v in self.client.volumes.list(filters=flt):
            with contextlib.suppress(docker.errors.NotFound):
                v.remove(force=True)
                removed["volumes"] += 1
        return removed

    def leftovers(self) -> dict[str, list[str]]:
        """Names of containers, networks and volumes that still carry this project's label."""
        flt = {"label": self.label}
        return {
            "containers": [c.name for c in self.client.containers.list(all=True, filters=flt, ignore_removed=True)],
            "networks": [n.name for n in self.client.networks.list(filters=flt)],
            "volumes": [v.name for v in self.client.volumes.list(filters=flt)],
        }

    # ---- inspection and exec -----------------------------------------------------------------------
    def containers(self, role: str | None = None, *, all: bool = False) -> list[Any]:
        """SDK containers of this run, optionally of one role (master, worker, driver, proxy), by name."""
        labels = [self.label] + ([f"{ROLE_LABEL}={role}"] if role else [])
        found = self.client.containers.list(all=all, filters={"label": labels}, ignore_removed=True)
        return sorted(found, key=lambda c: c.name)

    def container(self, role: str) -> Any:
        """The one container of a single-instance role (master, driver, proxy)."""
        found = self.containers(role)
        if len(found) != 1:
            raise DockerStackError(
                f"expected one running {role} container in {self.project}, found {len(found)}"
            )
        return found[0]

    def network(self) -> Any:
        """The run's network (SDK object), e.g. for partition faults."""
        found = self.client.networks.list(filters={"label": self.label})
        if len(found) != 1:
            raise DockerStackError(f"expected one network labelled {self.label}, found {len(found)}")
        return found[0]

    def host_port(self, role: str, port: int) -> int:
        """The loopback port on the host published for ``port`` of a role's container (master 7077 and
        8080, proxy 8474)."""
        c = self.container(role)
        c.reload()
        bindings = (c.attrs["NetworkSettings"]["Ports"] or {}).get(f"{port}/tcp") or []
        if not bindings:
            raise DockerStackError(f"{role} port {port} is not published")
        return int(bindings[0]["HostPort"])

    def run_in_driver(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        timeout: float | None = None,
    ) -> tuple[int, str]:
        """Run ``cmd`` in the driver container and return ``(exit_code, stdout+stderr)``.

        A string runs through ``sh -c``. ``timeout`` kills the command inside the container (exit 137)
        so a hung job cannot hang the caller."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if timeout is not None:
            argv = ["timeout", "-s", "KILL", f"{max(1, int(timeout))}", *argv]
        result = self.container("driver").exec_run(argv, environment=dict(env or {}), workdir=workdir)
        return result.exit_code, (result.output or b"").decode("utf-8", "replace")

    @staticmethod
    def _tail(container: Any, lines: int = 30) -> str:
        try:
            return container.logs(tail=lines).decode("utf-8", "replace")
        except Exception as e:  # the container may already be gone
            return f"(no logs: {e})"

    # ---- context manager and signals ---------------------------------------------------------------
    def __enter__(self) -> DockerStack:
        self._install_signal_handlers()
        try:
            self.up()
            self.wait_healthy()
        except BaseException:
            try:
                self.down()
            finally:
                self._restore_signal_handlers()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.down()
        finally:
            self._restore_signal_handlers()

    def _install_signal_handlers(self) -> None:
        """Turn SIGTERM into ``SystemExit`` so ``__exit__`` runs (SIGINT raises ``KeyboardInterrupt``,
        unless the process was started with SIGINT ignored, as a shell starts a background job;
        ``statechaos`` sets it back). Only from the main thread, only over the default handler."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            self._saved_handlers[signal.SIGTERM] = signal.signal(signal.SIGTERM, _raise_system_exit)

    def _restore_signal_handlers(self) -> None:
        for sig, handler in self._saved_handlers.items():
            signal.signal(sig, handler)
        self._saved_handlers.clear()


def _raise_system_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM during cleanup and deliver the first one afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in saved:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        if pending:
            os.kill(os.getpid(), pending[0])
