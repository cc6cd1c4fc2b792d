"""`make bench`: jaxload against the hand-written JAX recipe, same pipeline, same run.

For each topology (1x8 and 2x4 local CPU processes), backend (tf.data, Grain), global batch size
in bytes (64 KiB, 3 MiB, 48 MiB) and number of leaves (1, 8), the methods below run the same
pipeline for a few steps, interleaved, several rounds; the table gives the median per-step time
and the spread (min-max of the round medians), slowest process. Methods:

- backend: the backend's per-process batches only (shard + batch), nothing assembled;
- recipe: the hand-written recipe: backend shard + batch, ``make_array_from_process_local_data``
  per leaf;
- device_put: ``jax.device_put(batch, sharding)`` (one process only: with several it assumes
  every process holds the whole global batch);
- grain_device_put: ``grain.experimental.device_put`` (one process, Grain only);
- jaxload p0 / p2: ``jaxload.from_*`` with ``prefetch=0`` / ``prefetch=2``.

Also: a training loop whose step costs about as much as loading (a sleep after the step is
dispatched, like a host waiting on an accelerator), hand-written vs jaxload; and assembly
bandwidth against a numpy copy of the same bytes. Writes benchmarks/results.md.
Run: .venv/bin/python benchmarks/bench.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import jaxload.testing

GLOBAL_ROWS = 64
SIZES = {"64 KiB": 64 * 2**10, "3 MiB": 3 * 2**20, "48 MiB": 48 * 2**20}
LEAVES = (1, 8)
BACKENDS = ("tf", "grain")
METHODS = ("backend", "recipe", "device_put", "grain_device_put", "jaxload p0", "jaxload p2")


def _steps(nbytes: int, quick: bool) -> tuple[int, int]:
    """(warm-up steps, timed steps) for a global batch of ``nbytes``."""
    warmup, steps = (32, 64) if nbytes < 2**20 else (32, 32) if nbytes < 2**24 else (4, 8)
    return (warmup, max(4, steps // 4)) if quick else (warmup, steps)


def _element(nbytes: int, leaves: int):
    import numpy as np

    per_leaf = nbytes // (GLOBAL_ROWS * leaves * 4)  # float32 values per row per leaf
    return {f"f{i}": np.full(per_leaf, i, np.float32) for i in range(leaves)}


def _pipeline(backend: str, element, num: int):
    """The unbatched pipeline every method starts from."""
    if backend == "tf":
        import tensorflow as tf

        return tf.data.Dataset.from_tensors(element).repeat(num)
    import grain

    return grain.MapDataset.range(num).map(lambda i: element)


def _local_batches(backend: str, ds, plan):
    """What the backend alone produces: this loading group's batches, as numpy."""
    if backend == "tf":
        import tensorflow as tf

        ds = ds.shard(plan.shard_count, plan.shard_index).batch(plan.local_batch_size, True)
        return ds.prefetch(tf.data.AUTOTUNE).as_numpy_iterator()
    ds = ds[plan.shard_index::plan.shard_count].to_iter_dataset()
    return iter(ds.batch(plan.local_batch_size, drop_remainder=True))


def _method(name: str, backend: str, ds, layout, plan):
    """An iterator of batches (numpy or global arrays) for one method, or None if n/a."""
    import jax

    import jaxload

    if name == "backend":
        return _local_batches(backend, ds, plan)
    if name == "recipe":
        def recipe():
            for local in _local_batches(backend, ds, plan):
                yield {k: jax.make_array_from_process_local_data(
                    layout.sharding, v, (plan.global_batch_size,) + v.shape[1:])
                    for k, v in local.items()}
        return recipe()
    if name == "device_put":
        if jax.process_count() > 1:
            return None
        return (jax.device_put(b, layout.sharding) for b in _local_batches(backend, ds, plan))
    if name == "grain_device_put":
        if jax.process_count() > 1 or backend != "grain":
            return None
        import grain

        batched = ds.to_iter_dataset().batch(plan.local_batch_size, drop_remainder=True)
        return iter(grain.experimental.device_put(batched, layout.sharding))
    make = jaxload.from_tf_data if backend == "tf" else jaxload.from_grain
    return iter(make(ds, layout, global_batch_size=plan.global_batch_size,
                     prefetch=0 if name == "jaxload p0" else 2))


def _time_steps(batches, steps: int, warmup: int, work_s: float = 0.0) -> float:
    """Mean seconds per step over ``steps`` steps, after ``warmup`` steps.

    The mean, not the median: jaxload reads several batches ahead at once (one agreement per
    window of steps), so its steps are uneven and only the total is comparable.
    """
    import jax

    for _ in range(warmup):
        jax.block_until_ready(next(batches))
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        jax.block_until_ready(batch)
        if work_s:
            time.sleep(work_s)  # the training step: the host waits on the accelerator
    return (time.perf_counter() - start) / steps


def measure(quick: bool) -> dict:
    """Runs in every process of a topology."""
    import jax
    import numpy as np

    import jaxload

    layout = jaxload.data_parallel()
    plan = layout.plan(GLOBAL_ROWS)
    rounds = 2 if quick else 3
    table = {}
    for backend in BACKENDS:
        for size_name, nbytes in SIZES.items():
            for leaves in LEAVES:
                warmup, steps = _steps(nbytes, quick)
                element = _element(nbytes, leaves)
                num = GLOBAL_ROWS * (warmup + steps + 1)
                per_method: dict[str, list[float]] = {}
                for _ in range(rounds):  # interleaved: each round runs every method once
                    for name in METHODS:
                        batches = _method(name, backend, _pipeline(backend, element, num), layout,
                                          plan)
                        if batches is not None:
                            per_method.setdefault(name, []).append(
                                _time_steps(batches, steps, warmup))
                table[(backend, size_name, leaves)] = per_method

    # a training step as costly as loading, 3 MiB / 8 leaves, tf.data
    element = _element(SIZES["3 MiB"], 8)
    warmup, steps = _steps(SIZES["3 MiB"], quick)
    num = GLOBAL_ROWS * (warmup + steps + 1)
    load = statistics.median(
        _time_steps(_method("recipe", "tf", _pipeline("tf", element, num), layout, plan), steps,
                    warmup) for _ in range(rounds))
    training = {"load": load}
    for name in ("recipe", "jaxload p2"):
        training[name] = statistics.median(
            _time_steps(_method(name, "tf", _pipeline("tf", element, num), layout, plan), steps,
                        warmup, work_s=load) for _ in range(rounds))

    # assembly bandwidth vs a numpy copy of the same bytes (per process)
    bandwidth = {}
    for size_name in ("3 MiB", "48 MiB"):
        local = {k: np.repeat(v[None], plan.local_batch_size, 0)
                 for k, v in _element(SIZES[size_name], 1).items()}
        nbytes = sum(v.nbytes for v in local.values())
        dest = {k: np.empty_like(v) for k, v in local.items()}
        copy, assemble = [], []
        for _ in range(5 * rounds):
            start = time.perf_counter()
            for k, v in local.items():
                np.copyto(dest[k], v)
            copy.append(time.perf_counter() - start)
            start = time.perf_counter()
            jax.block_until_ready(jaxload.assemble(local, plan))
            assemble.append(time.perf_counter() - start)
        bandwidth[size_name] = (nbytes / statistics.median(copy), nbytes / statistics.median(assemble))
    load_once = _load_once(quick, rounds) if jax.process_count() > 1 else {}
    return {"table": table, "training": training, "bandwidth": bandwidth, "load_once": load_once,
            "process": jax.process_index()}


def _costly(element):
    """A pipeline step that costs CPU per element (stands in for decoding)."""
    import tensorflow as tf

    def decode(e):
        x = tf.random.stateless_normal((128, 128), seed=[1, 2])
        for _ in range(4):
            x = tf.tanh(x @ x)
        return {k: v + tf.reduce_mean(x) for k, v in e.items()}

    return decode


def _load_once(quick: bool, rounds: int) -> dict:
    """Replicas across all processes (one loading group): every process loads every row, or
    each loads its half and the batch is resharded on device (load_once=True)."""
    import jax
    import tensorflow as tf

    import jaxload

    layout = jaxload.model_replicas_across_processes(jax.process_count())
    out = {}
    for pipeline, size_name in (("cheap", "64 KiB"), ("cheap", "3 MiB"), ("costly", "64 KiB")):
        element = _element(SIZES[size_name], 1)
        warmup, steps = _steps(SIZES[size_name], quick) if pipeline == "cheap" else (4, 8)
        num = GLOBAL_ROWS * (warmup + steps + 1)
        for _ in range(rounds):
            for once in (False, True):
                # sharded before the costly map, as a file list would be: the work is split
                plan = layout.load_once_plan(GLOBAL_ROWS) if once else layout.plan(GLOBAL_ROWS)
                ds = tf.data.Dataset.from_tensors(element).repeat(num * plan.shard_count)
                ds = ds.shard(plan.shard_count, plan.shard_index)
                if pipeline == "costly":
                    ds = ds.map(_costly(element), num_parallel_calls=tf.data.AUTOTUNE)
                loader = jaxload.from_tf_data(ds, layout, global_batch_size=GLOBAL_ROWS,
                                              shard=False, load_once=once)
                out.setdefault((pipeline, size_name, once), []).append(
                    _time_steps(iter(loader), steps, warmup))
    return out


def _cell(values: list[float] | None) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values) * 1e3:.2f} ({min(values) * 1e3:.2f}-{max(values) * 1e3:.2f})"


def _slowest(results: list[dict], key, name) -> list[float] | None:
    """Per round, the slowest process's median: the step time the job sees."""
    series = [r["table"][key].get(name) for r in results]
    if any(s is None for s in series):
        return None
    return [max(values) for values in zip(*series, strict=True)]


def report(by_topology: dict[str, list[dict]], quick: bool, elapsed: float) -> str:
    lines = ["# jaxload benchmarks", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}; local CPU processes with fake devices "
             "(XLA_FLAGS=--xla_force_host_platform_device_count). "
             f"{'Quick run. ' if quick else ''}Wall time {elapsed:.0f} s.", "",
             "Per-step time in ms: each round's mean step time after warm-up, median over "
             "rounds, slowest process; in brackets the spread (min-max over rounds). Global batch of "
             f"{GLOBAL_ROWS} rows, data parallel. Ratios are jaxload / recipe in the same run.",
             ""]
    head = ["topology", "backend", "batch", "leaves", *METHODS, "p0/recipe", "p2/recipe"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for topology, results in by_topology.items():
        for key in results[0]["table"]:
            backend, size, leaves = key
            cells = {m: _slowest(results, key, m) for m in METHODS}
            recipe = statistics.median(cells["recipe"])
            ratios = [f"{statistics.median(cells[m]) / recipe:.2f}" for m in ("jaxload p0",
                                                                               "jaxload p2")]
            lines.append("| " + " | ".join([topology, backend, size, str(leaves),
                                           *(_cell(cells[m]) for m in METHODS), *ratios]) + " |")
    lines += ["", "## A training step as costly as loading (tf.data, 3 MiB, 8 leaves)", "",
              "The step is a sleep of the measured load time after the batch is ready (the host "
              "waiting on an accelerator). Hand-written pays load + step; with prefetch jaxload "
              "should approach max(load, step).", "",
              "| topology | load (ms) | recipe + step (ms) | jaxload p2 + step (ms) | "
              "jaxload / max(load, step) |", "|---|---|---|---|---|"]
    for topology, results in by_topology.items():
        t = max(results, key=lambda r: r["training"]["jaxload p2"])["training"]
        lines.append(f"| {topology} | {t['load'] * 1e3:.2f} | {t['recipe'] * 1e3:.2f} | "
                     f"{t['jaxload p2'] * 1e3:.2f} | {t['jaxload p2'] / t['load']:.2f} |")
    lines += ["", "## Assembly bandwidth against a numpy copy of the same bytes (per process)", "",
              "| topology | batch | numpy copy (GB/s) | jaxload.assemble (GB/s) | ratio |",
              "|---|---|---|---|---|"]
    for topology, results in by_topology.items():
        for size, (copy, assemble) in results[0]["bandwidth"].items():
            lines.append(f"| {topology} | {size} | {copy / 1e9:.2f} | {assemble / 1e9:.2f} | "
                         f"{assemble / copy:.2f} |")
    multi = {t: r for t, r in by_topology.items() if r[0]["load_once"]}
    if multi:
        lines += ["", "## Load once and reshard (replicas across processes)", "",
                  "One model replica spans all processes, so every process needs every row. "
                  "Per-step time (ms, slowest process, jaxload p2) when each process loads every "
                  "row, and with `load_once=True` (each loads its share; a jitted reshard on "
                  "device completes the batch). `costly` adds a CPU-heavy map per element.", "",
                  "| topology | pipeline | batch | every process loads all | load_once | ratio |",
                  "|---|---|---|---|---|---|"]
        for topology, results in multi.items():
            keys = sorted({k[:2] for k in results[0]["load_once"]})
            for pipeline, size in keys:
                cells = [[max(v) for v in zip(*(r["load_once"][(pipeline, size, once)]
                                                 for r in results), strict=True)]
                         for once in (False, True)]
                ratio = statistics.median(cells[1]) / statistics.median(cells[0])
                lines.append(f"| {topology} | {pipeline} | {size} | {_cell(cells[0])} | "
                             f"{_cell(cells[1])} | {ratio:.2f} |")
    lines += ["", "No accelerator on this machine: host-to-device transfer is not measured here."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results.md"))
    args = parser.parse_args()
    start = time.monotonic()
    by_topology = {}
    for processes, devices in ((1, 8), (2, 4)):
        by_topology[f"{processes}x{devices}"] = jaxload.testing.run(
            measure, num_processes=processes, local_devices=devices, args=(args.quick,),
            timeout_s=900)
    text = report(by_topology, args.quick, time.monotonic() - start)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
