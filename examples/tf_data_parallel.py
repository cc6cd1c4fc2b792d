"""Pure data parallelism over tf.data: the JAX guide's first recipe, with jaxload.

  jaxload launch -n 2 --local-devices 4 -- python examples/tf_data_parallel.py
"""

import jaxload

jaxload.initialize()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# The guide's fake data: 100 elements of shape (16, 3), element i filled with i.
ds = tf.data.Dataset.from_tensor_slices([np.ones((16, 3)) * i for i in range(100)])
loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=16)
batch = next(iter(loader))
print(f"global batch {batch.shape} {batch.dtype}, sharding {batch.sharding.spec}")
for shard in batch.addressable_shards:
    print(f"device {shard.device.id}: elements {np.asarray(shard.data)[:, 0, 0].astype(int).tolist()}")
print(f"{len(list(loader))} steps per epoch on process {jax.process_index()}")
