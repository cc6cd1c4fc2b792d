"""Preprocessing on tf.data service workers instead of the training hosts' CPUs.

A dispatcher and 2 workers are started here, on 127.0.0.1 (in a real job they run on CPU
machines of their own); 2 training processes x 4 fake CPU devices read from them with
``from_tf_data(..., service=...)``. The pipeline (a costly map standing in for decoding) runs
on the workers. For pure data parallelism the two processes get disjoint elements; with a model
replica spanning both processes, both hold every row, identical on every device.
Run: ``.venv/bin/python examples/tf_data_service.py``.
"""

from __future__ import annotations

import jaxload.testing
from jaxload._src.cluster import free_port

NUM_ELEMENTS = 200
GLOBAL_BATCH = 32


def pipeline():
    import tensorflow as tf

    def decode(i):  # stands in for image decoding and augmentation, in TensorFlow ops
        pixels = tf.random.stateless_uniform((32, 32, 3), seed=tf.stack([i, 0]))
        return {"id": tf.cast(i, tf.int32), "image": tf.image.flip_left_right(pixels)}

    return tf.data.Dataset.range(NUM_ELEMENTS).map(decode)


def read(service: str):
    import jax
    import numpy as np

    import jaxload

    out = {}
    for name, layout in (("data_parallel()", jaxload.data_parallel()),
                         ("model_replicas_across_processes(2)",
                          jaxload.model_replicas_across_processes(2))):
        loader = jaxload.from_tf_data(pipeline(), layout, global_batch_size=GLOBAL_BATCH,
                                      remainder="pad", service=service)
        held, steps = set(), 0
        for batch in loader:  # the loader's first-step check verifies replicas are identical
            steps += 1
            for ids, mask in zip(batch["id"].addressable_shards, batch["mask"].addressable_shards,
                                 strict=True):
                held.update(np.asarray(ids.data)[np.asarray(mask.data)].tolist())
        out[name] = (jax.process_index(), steps, sorted(held))
    return out


def main():
    import tensorflow as tf

    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=free_port()))
    workers = []
    for _ in range(2):
        port = free_port()
        workers.append(svc.WorkerServer(svc.WorkerConfig(
            dispatcher_address=dispatcher.target.split("://")[1],
            worker_address=f"127.0.0.1:{port}", port=port)))
    print(f"tf.data service: dispatcher + 2 workers; 2 processes x 4 CPU devices; "
          f"{NUM_ELEMENTS} elements, global batch {GLOBAL_BATCH}, remainder='pad'")
    results = jaxload.testing.run(read, num_processes=2, local_devices=4,
                                  args=(dispatcher.target,))
    for name in results[0]:
        (_, steps, held0), (_, _, held1) = (r[name] for r in results)
        both = set(held0) | set(held1)
        print(f"{name:<36} {steps} steps; process 0 holds {len(held0):>3} elements, process 1 "
              f"holds {len(held1):>3}, both {len(set(held0) & set(held1)):>3}; every element "
              f"delivered once: {sorted(both) == list(range(NUM_ELEMENTS))}")


if __name__ == "__main__":
    main()
