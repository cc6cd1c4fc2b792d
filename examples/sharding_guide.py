"""Sharding guide: 1-D and 2-D meshes, per-device batch, and a measured throughput table.

A batch dimension sharded over the "data" axis of a 1-D mesh (pure data parallelism) or of a
2-D ("data", "model") mesh (each per-replica batch replicated over "model"), with a fixed
per-device batch of images, so the global batch grows with the data-parallel devices.
Run: .venv/bin/python examples/sharding_guide.py [--quick]
"""

from __future__ import annotations

import argparse

import jaxload.testing

PER_DEVICE, IMAGE = 64, (32, 32, 3)


def throughput(mesh_shape, steps: int):
    import time

    import jax
    import numpy as np
    import tensorflow as tf

    import jaxload

    # Devices grouped process by process, so each process's devices hold adjacent row blocks.
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    axes = ("data", "model")[: len(mesh_shape)]
    mesh = jax.sharding.Mesh(np.array(devices).reshape(mesh_shape), axes)
    layout = jaxload.Layout(mesh, "data")
    global_batch = PER_DEVICE * mesh.shape["data"]
    element = {"image": np.zeros(IMAGE, np.float32), "label": np.int32(0)}
    ds = tf.data.Dataset.from_tensors(element).repeat(global_batch * (steps + 3))
    batches = iter(jaxload.from_tf_data(ds, layout, global_batch_size=global_batch))
    jax.block_until_ready(next(batches))  # warm-up (and the first-step check)
    start = time.perf_counter()
    for _ in range(steps):
        batch = jax.block_until_ready(next(batches))
    elapsed = time.perf_counter() - start
    shard = batch["image"].addressable_shards[0]
    return {"spec": str(batch["image"].sharding.spec), "global": global_batch,
            "per_device": shard.data.shape[0], "mib": shard.data.nbytes / 2**20,
            "samples_s": global_batch * steps / elapsed}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    steps = 5 if quick else 40
    configs = [((1, 1), (1,)), ((1, 2), (2,)), ((1, 4), (4,)), ((1, 8), (8,)),
               ((1, 8), (4, 2)), ((2, 4), (8,)), ((2, 4), (4, 2))]
    if quick:  # one 1-D, one 2-D, one multi-process configuration
        configs = [configs[0], configs[4], configs[6]]
    print("| processes x devices | mesh | batch sharding | per-device batch | global batch | "
          "MiB per device | samples/s |")
    print("|---|---|---|---|---|---|---|")
    for (processes, local), shape in configs:
        r = jaxload.testing.run(throughput, num_processes=processes, local_devices=local,
                                args=(shape, steps))[0]
        mesh = " x ".join(f"{a}={n}" for a, n in zip(("data", "model"), shape, strict=False))
        print(f"| {processes} x {local} | {mesh} | {r['spec']} | {r['per_device']} | "
              f"{r['global']} | {r['mib']:.2f} | {r['samples_s']:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
