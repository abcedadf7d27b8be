"""The compose image's proxy role runs Shopify's Toxiproxy when the image build found a server
binary (compose/build-images.sh: ``STATECHAOS_TOXIPROXY_SERVER``, ``compose/toxiproxy/``, or the
reference build of ``../shared/tools/toxiproxy``), and statechaos's own otherwise; either way it
answers Toxiproxy's API. With the reference build present, the docker network scenarios
(test_docker_scenarios) therefore run through the real server."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from typing import Any

import pytest

from chaos.cluster.docker_stack import OWNER_LABEL, code_volumes, docker_client, owner_token
from chaos.cluster.toxiproxy import REFERENCE_DIR
from chaos.scope import PROJECT_LABEL
from harness.progress import ProgressWatch

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _get(url: str, path: str, ctr: Any, stall_s: float = 60.0) -> bytes:
    """GET once the container's server answers; gives up only when the container (its state and
    log) showed no progress for ``stall_s``."""
    watch = ProgressWatch(stall_s)
    while True:
        try:
            with urllib.request.urlopen(url + path, timeout=10) as r:
                return r.read()
        except OSError:
            ctr.reload()
            watch.observe(state=str(ctr.attrs.get("State")), log=len(ctr.logs()))
            if watch.stalled() is not None:
                raise
            time.sleep(0.3)


def test_proxy_role_serves_toxiproxy_api_from_the_real_server_when_built_in(image: str) -> None:
    client = docker_client()
    labels = {PROJECT_LABEL: f"sctest-{uuid.uuid4().hex[:8]}", OWNER_LABEL: owner_token()}
    ctr = client.containers.run(
        image,
        ["statechaos-node", "proxy"],
        detach=True,
        labels=labels,
        ports={"8474/tcp": ("127.0.0.1", None)},
        volumes=code_volumes(),  # statechaos's own server is the project's code, which no image holds
    )
    try:
        has_real = ctr.exec_run(["test", "-x", "/opt/statechaos/toxiproxy/toxiproxy-server"]).exit_code == 0
        ctr.reload()
        port = int(ctr.attrs["NetworkSettings"]["Ports"]["8474/tcp"][0]["HostPort"])
        url = f"http://127.0.0.1:{port}"
        version = json.loads(_get(url, "/version", ctr))["version"]
        assert version.endswith("-statechaos") != has_real, (version, has_real)
        if any(REFERENCE_DIR.glob("toxiproxy-server-*-linux-amd64.gz")):
            assert has_real, "the reference Toxiproxy build is present but the image's proxy is not it"
        req = urllib.request.Request(
            url + "/proxies",
            json.dumps({"name": "probe", "upstream": "127.0.0.1:8474", "listen": "127.0.0.1:0"}).encode(),
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 201 and json.loads(r.read())["listen"].startswith("127.0.0.1:")
    finally:
        ctr.remove(force=True)
