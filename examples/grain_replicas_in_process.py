"""Data + model parallelism with each model replica on 2 devices of one process, over Grain.

  jaxload launch -n 2 --local-devices 4 -- python examples/grain_replicas_in_process.py
"""

import jaxload

jaxload.initialize()

import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

layout = jaxload.model_replicas_in_process(2)  # mesh ("replica", "model") = (4, 2)
ds = grain.MapDataset.range(256).map(lambda i: {"tokens": np.full(8, i, np.int32)})
loader = jaxload.from_grain(ds, layout, global_batch_size=32)
batch = next(iter(loader))
for shard in batch["tokens"].addressable_shards:
    replica = int(np.argwhere(layout.mesh.devices == shard.device)[0][0])
    print(f"device {shard.device.id} (replica {replica}): rows {shard.index[0].start}-"
          f"{shard.index[0].stop - 1}, elements {np.asarray(shard.data)[:, 0].tolist()}")
jaxload.check.replication(batch)  # both devices of each replica hold the same rows
print(f"process {jax.process_index()}: replicas verified")
