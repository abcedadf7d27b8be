"""TCP transport between subtasks and to the driver's checkpoint coordinator: one import for its parts.

- ``frames``: length-prefixed msgpack frames, tagged (HMAC per frame) once a link is authenticated;
- ``link_auth``: the per-run secret, the mutual handshake every link opens with, optional TLS;
- ``data_channels``: input gates and output channels (records, barriers, backpressure);
- ``coordinator_link``: each task's link to the driver.

No Spark imports: the transport is tested on its own.
"""

from __future__ import annotations

from harness.spark.coordinator_link import (
    CONNECTED,
    DISCONNECTED,
    REJECTED,
    CoordinatorClient,
    CoordinatorServer,
)
from harness.spark.data_channels import Endpoint, InputGate, OutputChannel
from harness.spark.frames import FrameDecoder, FrameSealer, TransportClosed, TransportError, encode_frame
from harness.spark.link_auth import Refusal, RunSecret

__all__ = [
    "TransportError",
    "TransportClosed",
    "FrameDecoder",
    "FrameSealer",
    "encode_frame",
    "RunSecret",
    "Refusal",
    "InputGate",
    "OutputChannel",
    "CoordinatorServer",
    "CoordinatorClient",
    "Endpoint",
    "CONNECTED",
    "DISCONNECTED",
    "REJECTED",
]
