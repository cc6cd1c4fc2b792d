"""Recipe: an existing tf.data file pipeline, pure data parallel, on several hosts under SLURM.

Your pipeline stays as it is (list_files -> interleave(TFRecordDataset) -> map(parse) ->
shuffle), unbatched; jaxload gives each process its own files, batches 1024 / process_count rows
per process and hands you global jax.Arrays. Each epoch reshuffles (the order of epoch n is that
of your pipeline's n-th iteration).

On a cluster (4 hosts x 8 GPUs, one process per GPU, JAX's default under SLURM; jax.distributed
finds the cluster by itself; 32 processes read 32 groups of files, so write at least 32 files):
  srun --nodes=4 --ntasks-per-node=8 --gpus-per-task=1 \
      python tf_files_slurm.py "gs://my-bucket/train-*.tfrecord"
On this machine (writes 16 small stand-in files first):
  jaxload launch -n 2 --local-devices 4 -- python examples/recipes/tf_files_slurm.py
"""

import sys

import jaxload

jaxload.initialize()  # before any other JAX call: jax.distributed.initialize() under SLURM

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def stand_in_files() -> str:
    """16 small TFRecord files in a temporary directory, for a run with no path given
    (recipe_data.py, beside this script: not needed on a real cluster)."""
    import recipe_data

    return recipe_data.tfrecords()


FILES = sys.argv[1] if len(sys.argv) > 1 else stand_in_files()  # REAL HOST: your glob
GLOBAL_BATCH = 1024
EPOCHS = 2


def parse(record):
    features = tf.io.parse_single_example(record, {
        "image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)})
    image = tf.io.decode_raw(features["image"], tf.uint8)
    return {"image": tf.cast(tf.reshape(image, [8, 8, 3]), tf.float32) / 255.0,
            "label": features["label"]}


files = tf.data.Dataset.list_files(FILES, shuffle=True, seed=0)
ds = (files.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE)
      .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
      .shuffle(10_000, seed=1))

layout = jaxload.data_parallel()  # every device one batch shard
loader = jaxload.from_tf_data(ds, layout, global_batch_size=GLOBAL_BATCH)
if jax.process_index() == 0:
    print(loader.explain().splitlines()[-2])  # how the pipeline is split


@jax.jit
def train_step(w, batch):
    x = batch["image"].reshape(batch["image"].shape[0], -1)
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - batch["label"]) ** 2))(w)
    return w - 0.01 * grad, loss


replicated = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec())
w = jax.device_put(np.zeros(8 * 8 * 3, np.float32), replicated)  # the same value everywhere
for epoch in range(EPOCHS):
    steps = 0
    for batch in loader:  # one pass = one epoch
        w, loss = train_step(w, batch)
        steps += 1
    print(f"process {jax.process_index()}: epoch {epoch}, {steps} steps of "
          f"{batch['image'].shape} ({loader.plan.local_batch_size} rows loaded here each step), "
          f"loss {float(loss):.3f}")

# Output (2 processes x 4 CPU devices; docs/recipes.md has it whole):
# [0] input: tf.data by files: each loading group reads 8 of the 16 files (1/2 of the records)
# [1] process 1: epoch 0, 8 steps of (1024, 8, 8, 3) (512 rows loaded here each step), loss 13.600
# [0] process 0: epoch 0, 8 steps of (1024, 8, 8, 3) (512 rows loaded here each step), loss 13.600
