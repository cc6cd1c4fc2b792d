"""How long each fault takes to end every process, and what the healthy processes print.

Runs tests/scripts/fault.py (a known-length pass, a jitted step with a cross-process all-reduce
every step, ``jax.distributed.initialize`` with JAX's defaults, the fault on process 1 at step
20) for each fault, with jaxload's defaults (``on_failure="exit"``, ``exit_grace_s=10``), and
prints a markdown table: the fault, each process's exit code, seconds from the fault to the last
process's end, and the first line a healthy process printed about it.

Usage: python benchmarks/faults.py [--processes 2] [--local-devices 2] [--backends grain,tf]
       [--faults pipeline,assembly,stuck,uncaught,kill]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import jaxload.testing

SCRIPT = str(Path(__file__).resolve().parent.parent / "tests" / "scripts" / "fault.py")
TIMEOUT_S = {"stuck": ["--timeout-s", "10"]}
NAMED = re.compile(r"(PeerFailedError: .*|jaxload: process 1 failed.*|.*tasks are unhealthy.*"
                   r"|.*heartbeat.*)")


def run(backend: str, fault: str, n: int, d: int) -> tuple[list, float | None, str]:
    argv = [SCRIPT, backend, fault, "20", *TIMEOUT_S.get(fault, [])]
    try:
        jaxload.testing.run_script(argv, num_processes=n, local_devices=d, timeout_s=200,
                                   fail_fast=False)
        return [0] * n, None, "(no failure)"
    except jaxload.testing.ProcessesFailed as e:
        faults = [float(t) for log in e.logs for t in re.findall(r"FAULT \w+ at ([\d.]+)", log)]
        start = min(faults) if faults else time.time()
        ends = [end for end in e.ended_at if end is not None]
        last = max(ends) - start if len(ends) == n else None
        seen = next((m.group(1) for line in e.logs[0].splitlines()
                     if (m := NAMED.search(line))), "(nothing)")
        return e.returncodes, last, seen[:160]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--local-devices", type=int, default=2)
    parser.add_argument("--backends", default="grain,tf")
    parser.add_argument("--faults", default="pipeline,assembly,stuck,uncaught,kill")
    args = parser.parse_args()
    print(f"{args.processes} processes x {args.local_devices} CPU devices, fault on process 1 "
          "at step 20 of 200\n")
    print("| backend | fault | exit codes | fault -> last process ended | process 0 printed |")
    print("|---|---|---|---|---|")
    for backend in args.backends.split(","):
        for fault in args.faults.split(","):
            codes, last, seen = run(backend, fault, args.processes, args.local_devices)
            took = "did not end (killed at 200 s)" if last is None else f"{last:.1f} s"
            print(f"| {backend} | {fault} | {codes} | {took} | `{seen}` |", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
