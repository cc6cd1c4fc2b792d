"""A loop that dispatches many steps ahead, never waiting, with gloo collectives on several CPU
devices per process: it deadlocked after ~30-100 steps with XLA:CPU's default thread pool on
a small machine (launch threads waiting for a device's in-flight slot starve the collective).
jaxload.testing and ``jaxload launch`` give each process enough threads (``NPROC``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import jaxload.testing
from jaxload._src.cluster import cpu_client_threads, process_env

SCRIPT = Path(__file__).parent / "scripts" / "dispatch_ahead.py"


@pytest.mark.cluster
def test_steps_dispatched_far_ahead_complete():
    logs = jaxload.testing.run_script([str(SCRIPT), "400"], num_processes=2, local_devices=4,
                                      timeout_s=120)
    assert all("done 400" in log for log in logs)


def test_each_process_gets_two_threads_per_device_at_least():
    assert int(process_env(0, 2, 8, 1234)["NPROC"]) >= 16
    assert cpu_client_threads(4, {"NPROC": "64"}) == "64"  # a larger setting is kept
    assert int(cpu_client_threads(4, {"NPROC": "2"})) >= 8
