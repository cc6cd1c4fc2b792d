"""A tf.data pipeline that reads files: each loading group reads and parses only its own files,
and a resume parses only what is left.

Writes 16 TFRecord files of 128 records, reads them with the usual list_files -> interleave ->
map(parse) pipeline (a counter in the parse), stops after 10 of 32 steps, and resumes a fresh
loader from the state. The counter is a py_function, a stateful op, so jaxload checkpoints this
pipeline with its buffers (under a symbolic checkpoint, positions only, TensorFlow would log a
warning for that op at every element): nothing is saved as the pass runs, and get_state takes
tf.data's iterator checkpoint then, with the batches read ahead of the loop. The resume restores
it, hands out those batches, and parses only the records after them: the elements tf.data had
parsed ahead come back from the checkpoint, and are not parsed again either.
  jaxload launch -n 2 --local-devices 4 -- python examples/tf_files.py DIR
"""

import sys

import jaxload

jaxload.initialize()

from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import tensorflow as tf  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/jaxload-tf-files").absolute()


def write_files() -> None:
    root.mkdir(parents=True, exist_ok=True)
    for f in range(16):
        with tf.io.TFRecordWriter(str(root / f"part-{f:02d}.tfrecord")) as writer:
            for i in range(128 * f, 128 * (f + 1)):
                feature = {"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
                writer.write(tf.train.Example(
                    features=tf.train.Features(feature=feature)).SerializeToString())


def pipeline(parsed: list[int]) -> tf.data.Dataset:
    """The pipeline, counting the records it parses in ``parsed`` (its own counter: a closed
    pipeline's reading thread may still parse a record or two)."""
    def count(serialized):
        parsed[0] += 1
        return serialized

    def parse(serialized):
        serialized = tf.ensure_shape(tf.py_function(count, [serialized], tf.string), [])
        return tf.io.parse_single_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})

    files = tf.data.Dataset.list_files(str(root / "*.tfrecord"), shuffle=False)
    ds = files.interleave(tf.data.TFRecordDataset, cycle_length=4).map(parse)
    options = tf.data.Options()  # the counter's state need not be saved
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return ds.with_options(options)


if jax.process_index() == 0:
    write_files()
multihost_utils.sync_global_devices("files written")

layout = jaxload.data_parallel()
loader = jaxload.from_tf_data(pipeline([0]), layout, global_batch_size=64)
if jax.process_index() == 0:
    print(*loader.explain().splitlines()[-2:], sep="\n")  # how it is split, how it resumes
batches = iter(loader)
for _ in range(10):
    next(batches)
state = loader.get_state()
batches.close()

parsed = [0]
resumed = jaxload.from_tf_data(pipeline(parsed), layout, global_batch_size=64)
resumed.set_state(state)
steps = sum(1 for _ in resumed)
saved = state["position"]["saved"]  # taken at step 10, with the batches read ahead
ahead, local = len(saved["ahead"]), loader.plan.local_batch_size
print(f"process {jax.process_index()}: stopped at step 10 of 32, resumed for {steps} steps, "
      f"parsing {parsed[0]} records (at most {steps - ahead} x {local} rows: the {ahead} batches "
      f"read ahead of step 10 come from the state, nothing before it is read); state: "
      f"{len(str(state)):,} bytes, {state['backend']}, iterator saved at batch {saved['batches']}")
assert saved["batches"] == 10 and 0 < parsed[0] <= (steps - ahead) * local
