"""A fault on one process in the middle of a known-length pass ends every process, in bounded time,
with the cause named on every healthy process (tests/scripts/fault.py; real processes, a jitted
step with a cross-process all-reduce every step, ``jax.distributed.initialize`` with JAX's
defaults).

Bounds, from the fault to the last process's end:
- an exception (pipeline, assembly, the user's own code): published at once; every process ends
  by ``exit_grace_s`` later at most (the watchdog's exit), and process 0, which hosts the
  coordination service, waits for the others to end first (at most ``exit_grace_s`` + 5 s).
  Asserted: ``exit_grace_s`` + 10 s (2 s of slack for a loaded 2-core machine).
- a stuck pipeline: found ``timeout_s`` after its read began, plus up to the watchdog's wake
  interval (10 s), then as above: ``timeout_s`` + 10 + ``exit_grace_s`` + 10 s.
- a killed process: under ``jaxload launch`` the launcher ends the others at once (asserted:
  30 s); with JAX's default heartbeat the coordination service declares it dead after 100 s
  (asserted: 120 s, one run).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jaxload.testing

SCRIPT = str(Path(__file__).parent / "scripts" / "fault.py")
SLACK_S = 10.0
WAKE_S = 10.0


def run_fault(num_processes: int, local_devices: int, *args: str, timeout_s: float = 150):
    """Runs the fault script; returns exit codes, seconds from the fault to each end, and logs."""
    with pytest.raises(jaxload.testing.ProcessesFailed) as failed:
        jaxload.testing.run_script([SCRIPT, *args], num_processes=num_processes,
                                   local_devices=local_devices, timeout_s=timeout_s,
                                   fail_fast=False)
    e = failed.value
    faults = [float(t) for log in e.logs for t in re.findall(r"FAULT \w+ at ([\d.]+)", log)]
    assert faults, "no process announced its fault:\n" + str(e)
    ends = [None if end is None else end - min(faults) for end in e.ended_at]
    return e.returncodes, ends, e.logs, str(e)


def assert_all_ended(codes, ends, bound_s: float, description: str) -> None:
    assert all(c not in (None, 0) for c in codes), f"exit codes {codes}\n{description}"
    assert all(end is not None and end < bound_s for end in ends), (
        f"seconds from fault to end {ends}, bound {bound_s}\n{description}")


def assert_last_lines(logs, processes, *parts: str) -> None:
    """Each process's last line names the failure (log collectors show last lines)."""
    for p in processes:
        lines = [line for line in logs[p].splitlines() if line.strip()]
        for part in parts:
            assert lines and part in lines[-1], (
                f"process {p}'s last line does not name {part!r}:\n{logs[p][-3000:]}")


def assert_named(logs, healthy, *parts: str) -> None:
    for p in healthy:
        for part in parts:
            assert part in logs[p], f"process {p} does not name {part!r}:\n{logs[p][-3000:]}"


CASES = [
    # backend, processes x devices, fault, what a healthy process must name: each fault with
    # each backend once, and each backend and fault at 4 processes once
    ("tf", 2, 2, "pipeline", ["process 1 failed while loading step 20", "ValueError: corrupt record"]),
    ("grain", 4, 2, "pipeline", ["process 1 failed while loading step 20", "ValueError: corrupt record"]),
    ("tf", 2, 2, "assembly", ["process 1 failed while assembling step 20",
                              "ValueError: cannot assemble step 20"]),
    ("grain", 4, 2, "assembly", ["process 1 failed while assembling step 20",
                                 "differs from the first one"]),
    ("grain", 2, 2, "uncaught", ["process 1 failed while running the program",
                                 "uncaught KeyError: 'loss'"]),
    ("tf", 4, 2, "uncaught", ["process 1 failed while running the program",
                              "uncaught KeyError: 'loss'"]),
]


@pytest.mark.cluster
@pytest.mark.parametrize("backend,n,d,fault,named", CASES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}-{c[3]}" for c in CASES])
def test_an_exception_on_one_process_ends_every_process_naming_it(backend, n, d, fault, named):
    grace = 10.0 if fault == "pipeline" else 3.0  # the default, and a shorter one
    extra = [] if fault == "pipeline" else ["--grace-s", str(grace)]
    codes, ends, logs, description = run_fault(n, d, backend, fault, "20", *extra)
    assert_all_ended(codes, ends, grace + SLACK_S, description)
    assert_named(logs, [p for p in range(n) if p != 1], *named)
    assert_last_lines(logs, range(n), *named)
    # the failing process shows its own exception, with the process and step added
    if fault != "uncaught":
        assert f"jaxload: {named[0]}" in logs[1], logs[1][-3000:]


@pytest.mark.cluster
@pytest.mark.parametrize("backend,n,d", [("tf", 2, 2), ("grain", 4, 2)])
def test_a_stuck_pipeline_ends_every_process_with_its_stack(backend, n, d):
    timeout, grace = 4.0, 3.0
    codes, ends, logs, description = run_fault(
        n, d, backend, "stuck", "20", "--timeout-s", str(timeout), "--grace-s", str(grace))
    assert_all_ended(codes, ends, timeout + WAKE_S + grace + SLACK_S, description)
    where = "time.sleep(10**6)" if backend == "grain" else "iterator_get_next"
    assert_named(logs, [p for p in range(n) if p != 1],
                 "process 1 failed while loading step 20: PipelineStuckError: its pipeline is "
                 "stuck: no batch after 4 s", "Stack of thread", where)
    assert_last_lines(logs, range(n), "process 1 failed while loading step 20: "
                      "PipelineStuckError: its pipeline is stuck: no batch after 4 s")


@pytest.mark.cluster
@pytest.mark.parametrize("shutdown", [False, True])
def test_a_healthy_run_ends_normally(shutdown):
    """No fault: every process finishes and exits 0 at once, also when the program calls
    jax.distributed.shutdown() itself (the watchdog's read is then cancelled, not failed)."""
    start = time.monotonic()
    logs = jaxload.testing.run_script(
        [SCRIPT, "grain", "none", "--steps", "40", *(["--shutdown"] if shutdown else [])],
        num_processes=2, local_devices=2, timeout_s=120, fail_fast=False)
    assert all("finished 40 steps" in log and "jaxload:" not in log for log in logs), logs
    assert time.monotonic() - start < 60


@pytest.mark.cluster
def test_a_killed_process_ends_the_group_under_jaxload_launch():
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "jaxload", "launch", "-n", "2", "--local-devices", "2", "--",
         sys.executable, SCRIPT, "grain", "kill", "20"],
        capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    assert result.returncode == 137, result.stderr[-3000:]
    assert "process 1 exited with code -9" in result.stderr, result.stderr[-3000:]
    assert elapsed < 30 + 15, elapsed  # 15 s of start-up on this machine


@pytest.mark.cluster
def test_a_killed_process_is_named_by_the_heartbeat_set_in_jaxload_initialize():
    """With jaxload.initialize(heartbeat_timeout_s=10) JAX's coordination service declares the
    killed process dead after 10 s and ends the other, naming it. (JAX's default of 100 s is
    measured in benchmarks/faults.py.)"""
    heartbeat = 10
    codes, ends, logs, description = run_fault(2, 2, "grain", "kill", "20",
                                               "--heartbeat", str(heartbeat))
    assert_all_ended(codes, ends, heartbeat + 20, description)
    assert "stopped sending heartbeats" in logs[0] and "\n1\n" in logs[0], logs[0][-3000:]
