"""Model replicas spread across processes: the guide's 4 processes x 2 devices example.

Processes 0 and 2 form one loading group and load the same rows, as do 1 and 3.
  jaxload launch -n 4 --local-devices 2 -- python examples/replicas_across_processes.py
"""

import jaxload

jaxload.initialize()

import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

layout = jaxload.model_replicas_across_processes(2)
ds = grain.MapDataset.range(64).map(lambda i: {"x": np.float32(i)})
loader = jaxload.from_grain(ds, layout, global_batch_size=8)
plan = loader.plan
batch = next(iter(loader))  # the first step's check proves replicas match across processes
rows = {s.device.id: np.asarray(s.data).astype(int).tolist() for s in batch["x"].addressable_shards}
print(f"process {jax.process_index()}: loading group {plan.shard_index} "
      f"{plan.loading_groups[plan.shard_index]}, device rows {rows}")
