"""Per-step cost of the step agreement vs a device collective, in 2 processes x 4 CPU devices.

Run: .venv/bin/python benchmarks/agreement_cost.py
"""

from __future__ import annotations

import jaxload.testing

STEPS = 300


def measure():
    import time

    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from jaxload._src import protocol
    from jaxload._src.agreement import Exchange

    def decide(reports):
        d = protocol.decide(protocol.parse(reports), step=0, window=16, pad=False)
        return d.to_json(), False

    exchange = Exchange("bench", timeout_s=60)
    report = protocol.Report(ready=16, digest="0123456789abcdef", nbytes=2**20).to_json()
    exchange.round(report, decide)
    start = time.perf_counter()
    for _ in range(STEPS):
        exchange.round(report, decide)
    kv = (time.perf_counter() - start) / STEPS
    exchange.leave()

    flag = np.ones((1,), np.int32)
    multihost_utils.process_allgather(flag)
    start = time.perf_counter()
    for _ in range(STEPS):
        multihost_utils.process_allgather(flag)
    gather = (time.perf_counter() - start) / STEPS
    return jax.process_index(), kv, gather


def main():
    for p, kv, gather in jaxload.testing.run(measure, num_processes=2, local_devices=4):
        print(f"process {p}: step agreement {kv * 1e6:7.0f} us/step   "
              f"process_allgather of a flag {gather * 1e6:7.0f} us/step")


if __name__ == "__main__":
    main()
