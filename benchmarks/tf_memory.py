"""tf.data in memory, as the tutorials write it: jaxload against the hand recipe over 3 epochs,
the state's bytes, what ``get_state`` costs and the first batch after a resume.

The data: 4,096 images of 32x32x3 float32 (48 MB) and an int64 label, in numpy arrays, global
batch 128 (32 steps an epoch), data parallel, at 1 process x 8 CPU devices, 2 x 4 and 4 x 2.
Four pipelines, each given to jaxload unsharded and unbatched:

- ``from_tensor_slices``;
- ``+ map``: ``.map(augment, num_parallel_calls=AUTOTUNE)``, augment = a random flip and a
  random brightness (``tf.image.random_*``, unseeded, as tutorials write them);
- ``+ shuffle``: ``.shuffle(4096, seed=1)``;
- ``+ shuffle + map``: ``.shuffle(4096, seed=1).map(augment, num_parallel_calls=AUTOTUNE)``.

The recipe is the fastest a tf.data user writes for K processes: ``from_tensor_slices(...)
.shard(K, k)`` first (each process slices only its own rows), then the same shuffle and map,
``.batch(local, drop_remainder=True).prefetch(AUTOTUNE)`` and
``jax.make_array_from_process_local_data`` per feature.

jaxload runs with ``prefetch=2`` (the default) and with ``prefetch=0``.

Timed, slowest process, median of interleaved rounds (min-max): *kept*, one loader (or recipe
pipeline) built once and iterated over 3 epochs, from building it to the last batch of the third
epoch; *per epoch*, a loader built for each of the 3 epochs (the build inside each). Every row
includes the first batch and the build. Then, for ``+ shuffle + map`` per topology: the state's
bytes after 5 steps, the time of ``get_state()``, and a fresh loader's first batch after
``set_state`` of a state taken at 10% and at 90% of an epoch.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/tf_memory.py [--quick] [--topologies 1x8,2x4,4x2]
"""

from __future__ import annotations

import json
import statistics
import time
import warnings
from pathlib import Path

from sections import arguments, ended, first_batches_after, ms_cell, publish

import jaxload
import jaxload.testing

SECTION = "<!-- tf_memory.py -->"
N, SIDE, GLOBAL_BATCH, EPOCHS, BUFFER = 4096, 32, 128, 3, 4096
STEPS = N // GLOBAL_BATCH
PIPELINES = ("from_tensor_slices", "+ map", "+ shuffle", "+ shuffle + map")
POSITIONS = (0.1, 0.9)
METHODS = ("recipe", "jaxload", "jaxload p0")  # jaxload: prefetch=2 (the default), p0: 0


def arrays():
    import numpy as np

    rng = np.random.default_rng(0)
    return {"image": rng.random((N, SIDE, SIDE, 3), dtype=np.float32),
            "label": np.arange(N, dtype=np.int64)}


def augment(e):
    import tensorflow as tf

    image = tf.image.random_flip_left_right(e["image"])
    return {"image": tf.image.random_brightness(image, 0.1), "label": e["label"]}


def pipeline(name: str, data, shard: tuple[int, int] | None = None):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices(data)
    if shard is not None:
        ds = ds.shard(*shard)
    if "shuffle" in name:
        ds = ds.shuffle(BUFFER, seed=1)
    if "map" in name:
        ds = ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE)
    return ds


def _recipe(name: str, data, layout, plan):
    import jax
    import tensorflow as tf

    local = pipeline(name, data, (plan.shard_count, plan.shard_index)).batch(
        plan.local_batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def epoch():
        return ({k: jax.make_array_from_process_local_data(
            layout.sharding, v, (GLOBAL_BATCH,) + v.shape[1:]) for k, v in b.items()}
            for b in local.as_numpy_iterator())
    return epoch


def _epochs(method: str, kept: bool, name: str, data, layout, plan) -> float:
    """Seconds of 3 epochs, from building to the last batch ready of the third."""
    import jax
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"tf_memory {method} {kept} {name}")
    started = time.perf_counter()
    make = None
    for _ in range(EPOCHS):
        if make is None or not kept:
            if method == "recipe":
                make = _recipe(name, data, layout, plan)
            else:
                loader = jaxload.from_tf_data(pipeline(name, data), layout,
                                              global_batch_size=GLOBAL_BATCH,
                                              prefetch=0 if method == "jaxload p0" else 2)
                make = loader.__iter__
        steps = 0
        for batch in make():
            jax.block_until_ready(batch)
            steps += 1
        assert steps == STEPS, (method, name, steps)
    return time.perf_counter() - started


def passes(rounds: int) -> dict:
    """Worker side: per (pipeline, kept, method), the seconds of each round's 3 epochs."""
    warnings.simplefilter("ignore")
    layout, data, out = jaxload.data_parallel(), arrays(), {}
    plan = layout.plan(GLOBAL_BATCH)
    for name in PIPELINES:
        for kept in (True, False):
            for r in range(rounds):
                for method in METHODS if r % 2 == 0 else reversed(METHODS):
                    out.setdefault(f"{name}|{kept}|{method}", []).append(
                        _epochs(method, kept, name, data, layout, plan))
    return out


def states(rounds: int) -> dict:
    """Worker side: the state's bytes after 5 steps and get_state's seconds; per position,
    the seconds from a fresh loader's first next() after set_state to its batch."""
    warnings.simplefilter("ignore")
    layout, data, name = jaxload.data_parallel(), arrays(), "+ shuffle + map"

    def make():
        return jaxload.from_tf_data(pipeline(name, data), layout, global_batch_size=GLOBAL_BATCH)

    taken, saved, out = make(), {}, {"get_state": []}
    batches = iter(taken)
    for step in range(1, STEPS):
        next(batches)
        if step == 5:
            out["bytes"] = len(json.dumps(taken.get_state()))
            for _ in range(20):
                started = time.perf_counter()
                taken.get_state()
                out["get_state"].append(time.perf_counter() - started)
        for p in POSITIONS:
            if step == round(p * STEPS):
                saved[p] = taken.get_state()
    batches.close()
    out.update(first_batches_after(make, saved, rounds))
    return out


def _slowest(series: list[list[float]]) -> list[float]:
    return [max(values) for values in zip(*series, strict=True)]


def rows(topology: str, results: list[dict]) -> list[str]:
    lines = []
    for name in PIPELINES:
        for kept in (True, False):
            times = {m: _slowest([r[f"{name}|{kept}|{m}"] for r in results]) for m in METHODS}
            ratios = [statistics.median(times[m]) / statistics.median(times["recipe"])
                      for m in METHODS[1:]]
            lines.append(f"| {topology} | {name} | {'kept' if kept else 'per epoch'} | "
                         + " | ".join(ms_cell(times[m], EPOCHS) for m in METHODS)
                         + "".join(f" | {ratio:.2f}" for ratio in ratios) + " |")
    return lines


def state_rows(topology: str, results: list[dict]) -> str:
    first = {p: statistics.median(_slowest([r[p] for r in results])) for p in POSITIONS}
    get = max(statistics.median(r["get_state"]) for r in results)
    return (f"| {topology} | {max(r['bytes'] for r in results):,} | {get * 1e3:.2f} | "
            + " | ".join(f"{first[p] * 1e3:.0f}" for p in POSITIONS)
            + f" | {first[0.9] / first[0.1]:.2f} |")


def main() -> None:
    args = arguments()
    rounds = 2 if args.quick else 5
    started = time.perf_counter()
    table = ["| topology | pipeline | loader | recipe, ms an epoch | jaxload, ms an epoch | "
             "jaxload prefetch=0, ms an epoch | jaxload / recipe | prefetch=0 / recipe |",
             "|---|---|---|---|---|---|---|---|"]
    resumes = ["| topology | state bytes per process | get_state (ms) | first batch after "
               "a resume at 10% (ms) | at 90% (ms) | 90% / 10% |", "|---|---|---|---|---|---|"]
    for topology in args.topologies.split(","):
        processes, devices = map(int, topology.split("x"))
        kwargs = dict(num_processes=processes, local_devices=devices, args=(rounds,),
                      timeout_s=1200)
        table += rows(topology, jaxload.testing.run(passes, **kwargs))
        resumes.append(state_rows(topology, jaxload.testing.run(states, **kwargs)))
    publish(Path(args.out), SECTION, [
        SECTION, "", "## tf.data in memory, as the tutorials write it", "",
        f"{N} images of {SIDE}x{SIDE}x3 float32 (48 MB) and a label, from_tensor_slices, "
        f"optionally shuffle({BUFFER}, seed=1) and a random-augmenting map (AUTOTUNE), global "
        f"batch {GLOBAL_BATCH}, data parallel; the recipe shards first "
        "(`from_tensor_slices(...).shard(K, k)`). Milliseconds an epoch over 3 epochs, from "
        "building to the last batch (first batches and builds included), slowest process, "
        f"median of {rounds} interleaved rounds (min-max); *kept*: one loader over the 3 "
        "epochs, *per epoch*: one built per epoch. *jaxload*: the default, `prefetch=2` (a "
        "background thread assembles the batches ahead); *prefetch=0*: the loop's own thread "
        "does.", "", *table, "",
        "The shuffled and augmented pipeline: the state after 5 steps, and the first batch of "
        "a fresh loader after `set_state(head_start=False)` (median, slowest process).", "",
        *resumes, "", ended(started)])


if __name__ == "__main__":
    main()
