"""Processes that disagree about which loader or check they are at.

Usage (under jaxload.testing.run_script):
  out_of_step.py BACKEND CASE PROCESS

BACKEND: grain | tf. CASE:
  loader  process PROCESS alone builds an extra loader and iterates it (to print a few
          examples), then every process builds and iterates the shared loader
  check   process PROCESS alone runs jaxload.check.batch on a batch of the shared loader
  named   as ``loader``, but every loader has a name=: process PROCESS alone iterates 'peek'

Each process prints ``START <time>`` before its first loader is iterated.
"""

import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("backend")
parser.add_argument("case")
parser.add_argument("process", type=int)
args = parser.parse_args()

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(os.environ["JAXLOAD_COORDINATOR"],
                           int(os.environ["JAXLOAD_NUM_PROCESSES"]),
                           int(os.environ["JAXLOAD_PROCESS_ID"]))

import numpy as np  # noqa: E402

import jaxload  # noqa: E402

p = jax.process_index()
layout = jaxload.data_parallel()
G = 2 * jax.device_count()
n = G * 50

if args.backend == "grain":
    import grain

    ds = grain.MapDataset.range(n).map(lambda i: {"x": np.full(3, i, np.float32)})
    make = jaxload.from_grain
else:
    import tensorflow as tf

    ds = tf.data.Dataset.range(n).map(lambda i: {"x": tf.fill([3], tf.cast(i, tf.float32))})
    make = jaxload.from_tf_data

names = {"peek": {"name": "peek"}, "shared": {"name": "train"}} if args.case == "named" else {
    "peek": {}, "shared": {}}
print(f"START {time.time():.3f}", flush=True)
if args.case in ("loader", "named") and p == args.process:
    peek = make(ds, layout, global_batch_size=G, **names["peek"])
    for _, batch in zip(range(3), peek, strict=False):
        print("a few examples:", np.asarray(batch["x"].addressable_shards[0].data)[:2])
loader = make(ds, layout, global_batch_size=G, **names["shared"])
for step, batch in enumerate(loader):
    if args.case == "check" and p == args.process and step == 3:
        jaxload.check.batch(batch)
print(f"process {p} finished {step + 1} steps", flush=True)
