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

    from jaxload.agreement import StepAgreement

    agreement = StepAgreement("bench", timeout_s=60)
    payload = "batch['x']:float32[64, 3];batch['y']:int32[64]"
    agreement.exchange(0, payload)
    start = time.perf_counter()
    for step in range(1, STEPS + 1):
        agreement.exchange(step, payload)
    kv = (time.perf_counter() - start) / STEPS

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
