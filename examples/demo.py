"""jaxload demo: 2 processes x 4 fake CPU devices, one tf.data pipeline, the three layouts.

Each process builds the same tf.data pipeline (elements 0..63) and a loader per layout, takes
the first global batch, and reports what each of its devices holds. The parent prints the
placement table. Run with `make demo`, or `python examples/demo.py`.
"""

from __future__ import annotations

import jaxload.testing

NUM_PROCESSES, LOCAL_DEVICES, GLOBAL_BATCH = 2, 4, 16


def first_batch_placement():
    """Runs in every process: the first batch of each layout, shard by shard."""
    import jax
    import numpy as np
    import tensorflow as tf

    import jaxload

    layouts = {
        "data_parallel()": jaxload.data_parallel(),
        "model_replicas_in_process(2)": jaxload.model_replicas_in_process(2),
        "model_replicas_across_processes(2)": jaxload.model_replicas_across_processes(2),
    }
    report = {}
    for name, layout in layouts.items():
        ds = tf.data.Dataset.range(64).map(lambda i: {"id": i, "x": tf.fill([3], tf.cast(i, tf.float32))})
        loader = jaxload.from_tf_data(ds, layout, global_batch_size=GLOBAL_BATCH)
        batch = next(iter(loader))
        p = loader.plan
        shards = [(s.device.id, s.index[0].indices(GLOBAL_BATCH)[:2], np.asarray(s.data).tolist())
                  for s in batch["id"].addressable_shards]
        report[name] = dict(process=jax.process_index(), shard_index=p.shard_index,
                            shard_count=p.shard_count, local_batch_size=p.local_batch_size,
                            global_rows=p.global_rows, mesh=dict(layout.mesh.shape), shards=shards)
    return report


def main():
    reports = jaxload.testing.run(first_batch_placement, num_processes=NUM_PROCESSES,
                                  local_devices=LOCAL_DEVICES, timeout_s=300)
    print(f"jaxload demo: {NUM_PROCESSES} processes x {LOCAL_DEVICES} CPU devices, "
          f"tf.data range(64), global batch {GLOBAL_BATCH}, first step\n")
    for name in reports[0]:
        mesh = " x ".join(f"{k}={v}" for k, v in reports[0][name]["mesh"].items())
        print(f"{name}   mesh {mesh}")
        for r in (rep[name] for rep in reports):
            a, b = r["global_rows"]
            print(f"  process {r['process']}: loading group {r['shard_index']} of "
                  f"{r['shard_count']}, loads {r['local_batch_size']} rows = global rows {a}-{b - 1}")
        print("  device  process  global rows  element ids")
        for r in (rep[name] for rep in reports):
            for device, (a, b), ids in sorted(r["shards"]):
                print(f"  {device:>6}  {r['process']:>7}  {f'{a}-{b - 1}':>11}  {ids}")
        print()


if __name__ == "__main__":
    main()
