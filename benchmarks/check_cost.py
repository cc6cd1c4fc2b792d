"""Cost of the run-time checks per call, 2 processes x 4 CPU devices, a 3 MiB data-parallel batch.

Run: .venv/bin/python benchmarks/check_cost.py
"""

from __future__ import annotations

import jaxload.testing

CALLS = 30


def measure():
    import time

    import jax
    import numpy as np

    import jaxload

    layout = jaxload.data_parallel()
    plan = layout.plan(64)
    rng = np.random.default_rng(jax.process_index())
    local = {"image": rng.random((plan.local_batch_size, 3, 64, 64), np.float32),  # 3 MiB global
             "label": rng.integers(0, 10, plan.local_batch_size).astype(np.int32)}
    batch = jaxload.assemble(local, plan)
    nbytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(batch))
    out = {"global_batch_mib": nbytes / 2**20}
    for name, fn in [("replication", lambda: jaxload.check.replication(batch)),
                     ("distinct", lambda: jaxload.check.distinct(batch)),
                     ("batch (both)", lambda: jaxload.check.batch(batch)),
                     ("plan", lambda: jaxload.check.plan(layout, 64))]:
        fn()
        times = []
        for _ in range(CALLS):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        out[name] = float(np.median(times))
    return out


def main():
    results = jaxload.testing.run(measure, num_processes=2, local_devices=4)
    print(f"global batch: {results[0]['global_batch_mib']:.2f} MiB, 2 processes x 4 CPU devices, "
          f"median of {CALLS} calls")
    for name in ("replication", "distinct", "batch (both)", "plan"):
        print(f"  check.{name:<13} " + "  ".join(
            f"process {p}: {r[name] * 1e6:7.0f} us" for p, r in enumerate(results)))


if __name__ == "__main__":
    main()
