import jaxload

jaxload.initialize()            # first: joins this process to the JAX cluster

import grain
import jax
import numpy as np

ds = grain.MapDataset.range(1000).map(lambda i: {"x": np.float32(i), "id": np.int32(i)})
layout = jaxload.data_parallel()
loader = jaxload.from_grain(ds, layout, global_batch_size=64)

for step, batch in enumerate(loader):
    total = jax.jit(lambda b: b["x"].sum())(batch)   # a global array: every process sees 64 rows
    if step == 0:
        print(f"process {jax.process_index()}: loading group {loader.plan.shard_index} of "
              f"{loader.plan.shard_count}, {loader.plan.local_batch_size} rows per step; "
              f"step 0 sums {float(total)}")
print(f"{step + 1} steps of {batch['x'].shape[0]} rows on {jax.device_count()} devices")
