"""What building a loader costs over tf.data in memory, against the hand recipe's first batch.

``from_tensor_slices`` of 75 MB and of 300 MB of 32x32x3 float32 images (and an int64 label),
``shuffle(4096, seed=1)``, global batch 128, data parallel, at 1 process x 8 CPU devices and 2 x 4.
From the user's ``from_tensor_slices`` dataset (built before the clock starts on both sides: its copy
of the arrays is the user's either way) to the first global batch ready:

- *recipe*: ``.shard(K, k).shuffle(...).batch(local, drop_remainder=True).prefetch(AUTOTUNE)``,
  its first batch through ``jax.make_array_from_process_local_data``;
- *jaxload*: ``from_tf_data(ds, ...)`` and ``next(iter(loader))``; also the ``from_tf_data`` call
  alone (the build).

Slowest process, median of interleaved rounds (min-max). A build that copied or serialized the
arrays would grow with their size (about 10 ms per MB once); the difference jaxload - recipe
should not.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/tf_build.py [--quick] [--topologies 1x8,2x4]
"""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path

from sections import arguments, ended, ms_cell, publish, slowest

import jaxload
import jaxload.testing

SECTION = "<!-- tf_build.py -->"
SIDE, GLOBAL_BATCH, BUFFER = 32, 128, 4096
SIZES_MB = (75, 300)


def arrays(megabytes: int):
    import numpy as np

    n = megabytes * 2**20 // (SIDE * SIDE * 3 * 4)
    rng = np.random.default_rng(0)
    return {"image": rng.random((n, SIDE, SIDE, 3), dtype=np.float32),
            "label": np.arange(n, dtype=np.int64)}


def _recipe(data, layout, plan) -> dict[str, float]:
    import jax
    import tensorflow as tf

    source = tf.data.Dataset.from_tensor_slices(data)
    started = time.perf_counter()
    local = (source.shard(plan.shard_count, plan.shard_index)
             .shuffle(BUFFER, seed=1).batch(plan.local_batch_size, drop_remainder=True)
             .prefetch(tf.data.AUTOTUNE))
    batch = next(local.as_numpy_iterator())
    first = {k: jax.make_array_from_process_local_data(
        layout.sharding, v, (GLOBAL_BATCH,) + v.shape[1:]) for k, v in batch.items()}
    jax.block_until_ready(first)
    return {"first": time.perf_counter() - started}


def _jaxload(data, layout, plan) -> dict[str, float]:
    import jax
    import tensorflow as tf

    source = tf.data.Dataset.from_tensor_slices(data)
    started = time.perf_counter()
    loader = jaxload.from_tf_data(source.shuffle(BUFFER, seed=1), layout,
                                  global_batch_size=GLOBAL_BATCH)
    built = time.perf_counter()
    batches = iter(loader)
    jax.block_until_ready(next(batches))
    first = time.perf_counter()
    batches.close()
    return {"first": first - started, "build": built - started}


def builds(rounds: int) -> dict:
    """Worker side: per (size, method, measure), the seconds of each round."""
    from jax.experimental import multihost_utils

    warnings.simplefilter("ignore")
    layout, out = jaxload.data_parallel(), {}
    plan = layout.plan(GLOBAL_BATCH)
    for size in SIZES_MB:
        data = arrays(size)
        for r in range(rounds + 1):  # the first round warms both up and is not kept
            for method in ("recipe", "jaxload") if r % 2 == 0 else ("jaxload", "recipe"):
                multihost_utils.sync_global_devices(f"tf_build {size} {r} {method}")
                timed = (_recipe if method == "recipe" else _jaxload)(data, layout, plan)
                for measure, seconds in timed.items():
                    if r:
                        out.setdefault(f"{size}|{method}|{measure}", []).append(seconds)
    return out


def rows(topology: str, results: list[dict]) -> list[str]:
    lines = []
    for size in SIZES_MB:
        recipe = slowest(results, f"{size}|recipe|first")
        ours = slowest(results, f"{size}|jaxload|first")
        build = slowest(results, f"{size}|jaxload|build")
        more = statistics.median(ours) - statistics.median(recipe)
        lines.append(f"| {topology} | {size} MB | {ms_cell(recipe)} | {ms_cell(ours)} | "
                     f"{ms_cell(build)} | {more * 1e3:+.0f} |")
    return lines


def main() -> None:
    args = arguments()
    topologies = "1x8,2x4" if args.topologies == "1x8,2x4,4x2" else args.topologies
    rounds = 2 if args.quick else 5
    started = time.perf_counter()
    table = ["| topology | arrays | recipe: first batch (ms) | jaxload: first batch (ms) | "
             "of which from_tf_data (ms) | jaxload - recipe (ms) |", "|---|---|---|---|---|---|"]
    for topology in topologies.split(","):
        processes, devices = map(int, topology.split("x"))
        table += rows(topology, jaxload.testing.run(
            builds, num_processes=processes, local_devices=devices, args=(rounds,),
            timeout_s=1200))
    publish(Path(args.out), SECTION, [
        SECTION, "", "## Building a loader over tf.data in memory", "",
        f"from_tensor_slices of {' and '.join(f'{s} MB' for s in SIZES_MB)} of {SIDE}x{SIDE}x3 "
        f"float32 images and a label, shuffle({BUFFER}, seed=1), global batch {GLOBAL_BATCH}, "
        "data parallel. From the from_tensor_slices dataset (built before the clock, both "
        f"sides) to the first global batch ready; slowest process, median of {rounds} "
        "interleaved rounds (min-max), after one round not kept.", "", *table, "", ended(started)])


if __name__ == "__main__":
    main()
