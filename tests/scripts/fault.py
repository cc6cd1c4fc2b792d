"""A training loop in which one process meets a fault in the middle of a known-length pass.

Usage (under jaxload.testing.run_script or jaxload launch):
  fault.py BACKEND FAULT [STEP] [--on-failure raise] [--timeout-s S] [--grace-s S] [--heartbeat S]

BACKEND: grain | tf. FAULT, on process 1 at step STEP (default 20):
  pipeline   the pipeline's map raises ValueError("corrupt record N")
  assembly   the batch cannot be assembled: with Grain every row of process 1's batch has
             another shape; with tf.data (whose shapes are static) the assembly raises
  stuck      the pipeline's map never returns
  kill       the process kills itself (SIGKILL) in the training loop
  uncaught   the training loop raises KeyError (the user's own code)
  none       no fault (a healthy run)

The processes call ``jax.distributed.initialize`` themselves, with JAX's defaults (the cluster's
coordinates come from the environment jaxload.testing sets). The jitted step sums the batch over
every device, an all-reduce across processes every step, and the loop waits for each step.
"""

import argparse
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("backend")
parser.add_argument("fault")
parser.add_argument("step", type=int, nargs="?", default=20)
parser.add_argument("--on-failure", default=None)
parser.add_argument("--timeout-s", type=float, default=None)
parser.add_argument("--grace-s", type=float, default=None)
parser.add_argument("--heartbeat", type=int, default=None)
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--shutdown", action="store_true", help="call jax.distributed.shutdown()")
args = parser.parse_args()

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
if args.heartbeat:
    import jaxload  # noqa: E402

    jaxload.initialize(heartbeat_timeout_s=args.heartbeat)
else:
    jax.distributed.initialize(os.environ["JAXLOAD_COORDINATOR"],
                               int(os.environ["JAXLOAD_NUM_PROCESSES"]),
                               int(os.environ["JAXLOAD_PROCESS_ID"]))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxload  # noqa: E402

p = jax.process_index()
layout = jaxload.data_parallel()
G = 2 * jax.device_count()
plan = layout.plan(G)
fault_row = args.step * plan.local_batch_size  # the first row of process 1's batch at STEP
faulty = p == 1


def announce(what: str) -> None:
    print(f"FAULT {what} at {time.time():.3f}", flush=True)


def element(i):
    """Element i of process 1's shard (its position in the shard is i // shard_count)."""
    row = i // plan.shard_count
    if (faulty and args.fault == "assembly" and args.backend == "grain"
            and fault_row <= row < fault_row + plan.local_batch_size):
        if row == fault_row:
            announce("assembly")
        # another value at each reading: the first round compares a few elements read twice,
        # and leaves out a process whose readings differ; the fault is the assembly's to find
        return {"x": np.full(4, np.random.rand(), np.float32)}
    # only this process's own element: tf.data maps every element before the split, and the
    # others' would fail too (on TensorFlow's threads, after the first failure was reported)
    if faulty and row == fault_row and i % plan.shard_count == plan.shard_index:
        if args.fault == "pipeline":
            announce("pipeline")
            raise ValueError(f"corrupt record {i}")
        if args.fault == "stuck":
            announce("stuck")
            time.sleep(10**6)
    return {"x": np.full(3, i, np.float32)}


n = G * args.steps
if args.backend == "grain":
    import grain

    ds = grain.MapDataset.range(n).map(element)
    make = jaxload.from_grain
else:
    import tensorflow as tf

    def tf_element(i):
        x = tf.numpy_function(lambda v: element(int(v))["x"], [i], tf.float32, stateful=False)
        return {"x": tf.ensure_shape(x, [3])}

    if faulty and args.fault == "assembly":
        from jaxload._src import passes

        build_global, calls = passes.build_global, [0]

        def failing_build_global(*a, **k):
            calls[0] += 1
            if calls[0] == args.step + 1:
                announce("assembly")
                raise ValueError(f"cannot assemble step {args.step}: a bad shape")
            return build_global(*a, **k)

        passes.build_global = failing_build_global
    ds = tf.data.Dataset.range(n).map(tf_element)
    ds = ds.apply(tf.data.experimental.assert_cardinality(n))
    make = jaxload.from_tf_data

options = {}
if args.on_failure:
    options["on_failure"] = args.on_failure
if args.timeout_s:
    options["timeout_s"] = args.timeout_s
if args.grace_s is not None:
    options["exit_grace_s"] = args.grace_s
loader = make(ds, layout, global_batch_size=G, **options)


@jax.jit
def train_step(total, batch):
    return total + jnp.sum(batch["x"])  # an all-reduce over every device of every process


total = jnp.zeros((), jnp.float32)
for step, batch in enumerate(loader):
    if faulty and step == args.step and args.fault == "kill":
        announce("kill")
        os.kill(os.getpid(), signal.SIGKILL)
    if faulty and step == args.step and args.fault == "uncaught":
        announce("uncaught")
        raise KeyError("loss")
    total = train_step(total, batch)
    total.block_until_ready()
print(f"process {p} finished {step + 1} steps, total {float(total)}", flush=True)
if args.shutdown:
    jax.distributed.shutdown()
sys.exit(0)
