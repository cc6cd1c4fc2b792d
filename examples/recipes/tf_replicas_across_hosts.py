"""Recipe: a tf.data file pipeline feeding a model whose replicas span two hosts each.

Each model replica is spread over 2 processes (its parameters sharded along the mesh's "model"
axis), so those 2 processes form one loading group: they must load identical rows, which
jaxload makes so (the group reads its own files, in the same order on both) and proves every
step (a hash of each batch, compared within the group). The other groups read other files.

On a cluster (4 hosts x 8 GPUs, one process per GPU, replicas of 2 hosts = 16 processes: set
MODEL_PROCESSES = 16 below, which makes 2 loading groups of 16 processes):
  srun --nodes=4 --ntasks-per-node=8 --gpus-per-task=1 \
      python tf_replicas_across_hosts.py "gs://my-bucket/train-*.tfrecord"
On this machine (4 processes of 2 CPU devices; stand-in files):
  jaxload launch -n 4 --local-devices 2 -- python examples/recipes/tf_replicas_across_hosts.py
"""

import sys

import jaxload

jaxload.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402


def stand_in_files() -> str:
    """16 small TFRecord files in a temporary directory, for a run with no path given
    (recipe_data.py, beside this script: not needed on a real cluster)."""
    import recipe_data

    return recipe_data.tfrecords()


FILES = sys.argv[1] if len(sys.argv) > 1 else stand_in_files()  # REAL HOST: your glob
GLOBAL_BATCH, HIDDEN = 256, 32
MODEL_PROCESSES = 2  # REAL HOST: 16 (a replica over 2 hosts of 8 GPUs, one process per GPU)


def parse(record):
    features = tf.io.parse_single_example(record, {
        "image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)})
    image = tf.io.decode_raw(features["image"], tf.uint8)
    return {"image": tf.cast(tf.reshape(image, [8, 8, 3]), tf.float32) / 255.0,
            "label": tf.cast(features["label"], tf.float32)}


files = tf.data.Dataset.list_files(FILES, shuffle=True, seed=0)
ds = (files.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE)
      .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
      .shuffle(10_000, seed=1))  # seeded: both hosts of a replica shuffle alike

layout = jaxload.model_replicas_across_processes(MODEL_PROCESSES)  # axes ("replica", "model")
loader = jaxload.from_tf_data(ds, layout, global_batch_size=GLOBAL_BATCH)
plan = loader.plan
print(f"process {jax.process_index()}: loading group {plan.shard_index} of {plan.shard_count}, "
      f"processes {plan.loading_groups[plan.shard_index]}, {plan.local_batch_size} rows a step")

# the hidden layer's units are split over the "model" axis: each host holds half of them
hidden = NamedSharding(layout.mesh, PartitionSpec(None, "model"))
params = jax.device_put(np.full((8 * 8 * 3, HIDDEN), 0.01, np.float32), hidden)


@jax.jit
def train_step(params, batch):
    def loss_fn(params):
        x = batch["image"].reshape(batch["image"].shape[0], -1)
        prediction = jnp.sum(jax.nn.relu(x @ params), axis=-1)  # a sum over the model axis
        return jnp.mean((prediction - batch["label"]) ** 2)

    loss, grad = jax.value_and_grad(loss_fn)(params)
    return params - 1e-3 * grad, loss


steps = 0
for batch in loader:
    params, loss = train_step(params, batch)
    steps += 1
print(f"process {jax.process_index()}: {steps} steps, loss {float(loss):.3f}, "
      f"params {params.sharding.spec} over {dict(layout.mesh.shape)}")

# Output (4 processes x 2 CPU devices):
# [0] process 0: loading group 0 of 2, processes (0, 2), 128 rows a step
# [3] process 3: loading group 1 of 2, processes (1, 3), 128 rows a step
# [2] process 2: 32 steps, loss
