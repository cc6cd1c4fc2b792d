"""Quick reference: an in-memory source of 1024 samples, global batch 128, placement printed.

Run on one machine as 2 processes x 4 fake CPU devices:
  jaxload launch -n 2 --local-devices 4 -- python examples/quick_reference.py
On a real cluster, run it once per host as usual (jaxload.initialize() then calls
jax.distributed.initialize()).
"""

import jaxload

jaxload.initialize()  # first: sets up jax.distributed

import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

NUM_SAMPLES, GLOBAL_BATCH = 1024, 128

images = np.random.default_rng(0).random((NUM_SAMPLES, 8, 8, 3), dtype=np.float32)
labels = np.arange(NUM_SAMPLES) % 10
source = grain.MapDataset.source(np.arange(NUM_SAMPLES)).map(
    lambda i: {"image": images[i], "label": np.int32(labels[i]), "index": np.int32(i)})

layout = jaxload.data_parallel()
loader = jaxload.from_grain(source, layout, global_batch_size=GLOBAL_BATCH)
plan = loader.plan
print(f"process {jax.process_index()}: loading group {plan.shard_index} of {plan.shard_count}, "
      f"{plan.local_batch_size} rows per step")

steps, seen = 0, 0
for batch in loader:
    if steps == 0:
        for shard in batch["index"].addressable_shards:
            rows = shard.index[0]
            print(f"device {shard.device.id}: rows {rows.start}-{rows.stop - 1}, "
                  f"samples {np.asarray(shard.data)[:4].tolist()}...")
    steps += 1
    seen += sum(s.data.shape[0] for s in batch["index"].addressable_shards)
print(f"{steps} steps of {batch['image'].shape} {batch['image'].dtype}; this process loaded "
      f"{seen} of {NUM_SAMPLES} samples")
