"""Ctrl-C reaches ``statechaos`` however it was started. A shell without job control starts a
background job (``statechaos run ... &`` in a script or a CI step) with SIGINT ignored, and Python then
installs no KeyboardInterrupt handler of its own: a SIGINT sent to such a run was swallowed until
pyspark's SparkContext installed its handler, so a docker run interrupted while its stack came up went
on to its end and exited 0 (suites/docker/test_cleanup.py, launched from a background job)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import allure
import pytest

pytestmark = [allure.epic("chaos"), allure.feature("cleanup")]

ROOT = Path(__file__).resolve().parents[2]

# ``statechaos`` (its main(): the signal set-up, the exit codes) with a command that waits for
# SIGUSR1. The test sends SIGINT first and SIGUSR1 second: a SIGINT that is honoured raises
# KeyboardInterrupt before SIGUSR1's handler can run (Python runs pending handlers lowest signal
# first), so the command ends by SIGUSR1 only when the SIGINT was lost.
CHILD = """
import signal, sys, time
from chaos.report import cli

def wait_for_usr1(args):
    got = []
    signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    print("READY", flush=True)
    while not got:
        time.sleep(0.01)
    print("the SIGINT was lost", file=sys.stderr)
    return 0

class Parser:
    def parse_args(self, argv):
        return type("Args", (), {"fn": staticmethod(wait_for_usr1)})()

cli.build_parser = Parser
sys.exit(cli.main([]))
"""


@pytest.mark.parametrize("inherited", ["ignored", "default"])
def test_sigint_interrupts_statechaos_even_when_started_with_it_ignored(inherited: str) -> None:
    disposition = signal.SIG_IGN if inherited == "ignored" else signal.SIG_DFL
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, disposition),  # as `cmd &` in a script does
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY", proc.communicate()[1]
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGUSR1)
        _, err = proc.communicate(timeout=300)  # a guard against a hang only: it ends at once
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "the SIGINT was lost" not in err
    assert proc.returncode == 130, err
    assert "interrupted" in err
