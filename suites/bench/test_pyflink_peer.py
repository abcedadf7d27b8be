"""With PyFlink's venv built (``statechaos bench --setup-pyflink``), the peer in quick mode: both
sides count every record (each run checks its committed output), and the figure is a finite ratio of
marginal rates with PyFlink's configuration stated. Nothing about time or the target."""

from __future__ import annotations

import math

import psutil
import pytest

from chaos.extra.bench import pyflink_env, pyflink_peer
from chaos.extra.bench.core import Unavailable

pytestmark = [pytest.mark.bench, pytest.mark.slow, pytest.mark.spark]


def test_pyflink_peer_quick_gives_a_ratio_and_leaves_no_process() -> None:
    try:
        pyflink_env.ready_python()
    except pyflink_env.PyflinkUnavailable as e:
        pytest.skip(str(e))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        [fig] = pyflink_peer.run(True)
    except Unavailable as e:  # e.g. no suitable Java here
        pytest.skip(str(e))
    assert fig.value > 0 and fig.baseline > 0 and math.isfinite(fig.ratio)
    assert fig.baseline_name == pyflink_peer.PyflinkConfig().short()
    assert pyflink_peer.PyflinkConfig().describe() in fig.notes
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], left
