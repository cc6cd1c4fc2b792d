"""`make bench`: jaxload against the fastest hand-written code of each backend, in one run.

The input is what a new user starts from: images in memory, 256 rows of 32x32x3 float32 and an
int32 label per global step, data parallel, as an unbatched tf.data or Grain pipeline, with a
cheap map (a lookup) or a costly one (about 0.2 ms of numpy work per element). For each topology
(1 process x 8 CPU devices, 2 x 4), each method runs the same pipeline for a few steps,
interleaved (the order alternates between rounds), several rounds; the tables give the median
over rounds of the time per step of a pass from the iterator's creation (so a thread pool's
start and its read-ahead count), slowest process, and the spread (min-max).

Hand-written recipes (what a user of the backend writes; per-process data, then
``jax.make_array_from_process_local_data`` per feature, or with one process ``jax.device_put``
of the whole batch):

- Grain: ``MapDataset.batch`` read by index; ``.batch().to_iter_dataset()`` with no threads and
  with Grain's default thread pool; ``grain.DataLoader`` with ``worker_count`` 0 and 2.
- tf.data: ``shard().map().batch().prefetch(AUTOTUNE)``.

jaxload: ``from_grain`` / ``from_tf_data`` with ``prefetch`` 0 and 2; for Grain also with
``read_options=grain.ReadOptions(num_threads=2)`` (the documented choice for a costly map).

Also: a training loop whose step costs as much as loading (a sleep after the batch is ready, like
a host waiting on an accelerator), with the loader's time breakdown from ``loader.stats()``; the
assembly bandwidth against a numpy copy; load once and reshard. Writes benchmarks/results.md.
Run: .venv/bin/python benchmarks/bench.py [--quick]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import cloudpickle
import grain

import jaxload.testing

ROWS = 256  # global batch
SOURCE_ROWS = 1024  # distinct images in memory; element i is image i % SOURCE_ROWS
COSTLY_COPIES, COSTLY_PASSES = 16, 20  # the costly map: 20 tanh over 16 scaled copies (~0.2 ms)
PIPELINES = ("cheap", "costly")
THREADS = 2

GRAIN_RECIPES = ("MapDataset.batch", "MapDataset.batch device_put", "to_iter_dataset 0 threads",
                 "to_iter_dataset threads", "DataLoader w0", "DataLoader w2")
TF_RECIPES = ("batch().prefetch()", "batch().prefetch() device_put")
JAXLOAD = ("jaxload p0", "jaxload p2")
JAXLOAD_THREADS = ("jaxload threads p0", "jaxload threads p2")


def _steps(pipeline: str, quick: bool) -> tuple[int, int]:
    """(warm-up steps, timed steps) of a steady-state measurement (the training loop)."""
    warmup, steps = (16, 64) if pipeline == "cheap" else (4, 12)
    return (warmup, steps // 2) if quick else (warmup, steps)


def _pass_steps(pipeline: str, quick: bool, name: str = "") -> int:
    """Steps of a timed pass, from the iterator's creation on: long enough that a pass's
    start-up weighs little (grain.DataLoader, 30x slower per step here, gets a quarter)."""
    steps = 256 if pipeline == "cheap" else 24
    steps //= 4 if name.startswith("DataLoader") else 1
    return steps // 2 if quick else steps


_IMAGES = _LABELS = None


def _source():
    import numpy as np

    global _IMAGES, _LABELS
    if _IMAGES is None:
        rng = np.random.default_rng(0)
        _IMAGES = rng.random((SOURCE_ROWS, 32, 32, 3), np.float32)
        _LABELS = np.arange(SOURCE_ROWS, dtype=np.int32)
    return _IMAGES, _LABELS


def lookup(i) -> dict:
    """The cheap map: element ``i`` from the arrays in memory."""
    images, labels = _source()
    i = int(i) % SOURCE_ROWS
    return {"image": images[i], "label": labels[i]}


def decode(element: dict) -> dict:
    """The costly map: numpy work per element (stands in for decoding and augmenting)."""
    import numpy as np

    x = element["image"][None] * np.linspace(0.5, 1.5, COSTLY_COPIES, dtype=np.float32)[:, None,
                                                                                      None, None]
    for _ in range(COSTLY_PASSES):
        x = np.tanh(x)
    return {"image": x.mean(0), "label": element["label"]}


class Lookup(grain.transforms.Map):  # for grain.DataLoader: picklable, to its workers
    def map(self, i):
        return lookup(i)


class Decode(grain.transforms.Map):
    def map(self, element):
        return decode(element)


def _grain_source(pipeline: str, num: int):
    """The user's unbatched MapDataset."""
    ds = grain.MapDataset.range(num).map(lookup)
    return ds.map(decode) if pipeline == "costly" else ds


def _tf_source(pipeline: str, num: int, plan):
    """The user's unbatched tf.data pipeline, sharded before its map (as a file list is)."""
    import numpy as np
    import tensorflow as tf

    images, labels = _source()
    ds = tf.data.Dataset.from_tensor_slices({"image": images, "label": labels})
    ds = ds.repeat(-(-num // SOURCE_ROWS)).take(num).shard(plan.shard_count, plan.shard_index)
    if pipeline == "costly":
        scales = np.linspace(0.5, 1.5, COSTLY_COPIES, dtype=np.float32)[:, None, None, None]

        def costly(e):
            x = e["image"][None] * scales
            for _ in range(COSTLY_PASSES):
                x = tf.tanh(x)
            return {"image": tf.reduce_mean(x, 0), "label": e["label"]}
        ds = ds.map(costly, num_parallel_calls=tf.data.AUTOTUNE)
    return ds


def _put(layout, plan, whole: bool):
    import jax

    if whole:  # one process: the whole batch is local, device_put is exact
        return lambda local: jax.device_put(local, layout.sharding)

    def per_feature(local):
        return {k: jax.make_array_from_process_local_data(
            layout.sharding, v, (plan.global_batch_size,) + v.shape[1:]) for k, v in local.items()}
    return per_feature


def _grain_local(name: str, pipeline: str, num: int, plan):
    """This process's numpy batches, the way recipe ``name`` reads them."""
    rows, k, count = plan.local_batch_size, plan.shard_index, plan.shard_count
    if name.startswith("DataLoader"):
        sampler = grain.samplers.IndexSampler(
            num_records=num, shuffle=False, num_epochs=1, seed=0,
            shard_options=grain.sharding.ShardOptions(k, count, drop_remainder=True))
        ops = [Lookup()] + ([Decode()] if pipeline == "costly" else [])
        return iter(grain.DataLoader(
            data_source=range(num), sampler=sampler, worker_count=int(name[-1]),
            operations=ops + [grain.transforms.Batch(rows, drop_remainder=True)]))
    ds = _grain_source(pipeline, num)
    batches = (ds[k::count] if count > 1 else ds).batch(rows, drop_remainder=True)
    if name.startswith("MapDataset.batch"):
        return (batches[i] for i in range(len(batches)))
    options = (grain.ReadOptions(num_threads=0, prefetch_buffer_size=0) if "0 threads" in name
               else grain.ReadOptions())  # Grain's default: 16 threads
    return iter(batches.to_iter_dataset(options))


def _method(name: str, backend: str, pipeline: str, num: int, layout, plan):
    """An iterator of global batches for one method, or None where it does not apply."""
    import jax

    import jaxload

    whole = name.endswith("device_put")
    if whole and jax.process_count() > 1:
        return None  # device_put assumes every process holds the whole global batch
    if name.startswith("jaxload"):
        prefetch = int(name[-1])
        if backend == "tf":
            return iter(jaxload.from_tf_data(_tf_source(pipeline, num, plan), layout, shard=False,
                                             global_batch_size=ROWS, prefetch=prefetch))
        threads = {"read_options": grain.ReadOptions(num_threads=THREADS,
                                                     prefetch_buffer_size=2 * THREADS)}
        return iter(jaxload.from_grain(_grain_source(pipeline, num), layout,
                                       global_batch_size=ROWS, prefetch=prefetch,
                                       **(threads if "threads" in name else {})))
    put = _put(layout, plan, whole)
    if backend == "tf":
        import tensorflow as tf

        local = (_tf_source(pipeline, num, plan).batch(plan.local_batch_size, True)
                 .prefetch(tf.data.AUTOTUNE).as_numpy_iterator())
    else:
        local = _grain_local(name.removesuffix(" device_put"), pipeline, num, plan)
    return (put(b) for b in local)


def _methods(backend: str, pipeline: str) -> tuple[str, ...]:
    if backend == "tf":
        return TF_RECIPES + JAXLOAD
    return GRAIN_RECIPES + JAXLOAD + (JAXLOAD_THREADS if pipeline == "costly" else ())


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
    elapsed = (time.perf_counter() - start) / steps
    close = getattr(batches, "close", None)
    if close:
        close()
    return elapsed


def _time_pass(make, steps: int) -> float:
    """Seconds per step of a pass of ``steps`` steps, from creating the iterator (``make()``)
    to the last batch ready: start-up (threads, worker processes, the first agreement) counts,
    and so does what a thread pool builds ahead while the first batch is awaited (time spent
    then is not hidden by a warm-up that would consume the buffer it filled)."""
    import jax

    start = time.perf_counter()
    batches = make()
    if batches is None:
        return None
    for _ in range(steps):
        jax.block_until_ready(next(batches))
    elapsed = (time.perf_counter() - start) / steps
    close = getattr(batches, "close", None)
    if close:
        close()
    return elapsed


def measure(quick: bool) -> dict:
    """Runs in every process of a topology."""
    import jax
    from absl import flags

    import jaxload

    flags.FLAGS.mark_as_parsed()  # grain.DataLoader's workers read absl flags (no app.run here)
    # this file is loaded under a private module name: its Map classes go to the workers by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    layout = jaxload.data_parallel()
    plan = layout.plan(ROWS)
    rounds = 2 if quick else 3
    table = {}
    for pipeline in PIPELINES:
        num = ROWS * (_pass_steps(pipeline, quick) + 1)
        for backend in ("tf", "grain"):
            names = _methods(backend, pipeline)
            for name in (names[0], "jaxload p0"):  # compiles the puts, untimed
                _time_pass(functools.partial(_method, name, backend, pipeline, num, layout, plan), 2)
            times: dict[str, list[float]] = {}
            for r in range(rounds):  # interleaved, in alternating order
                for name in names if r % 2 == 0 else reversed(names):
                    t = _time_pass(
                        functools.partial(_method, name, backend, pipeline, num, layout, plan),
                        _pass_steps(pipeline, quick, name))
                    if t is not None:
                        times.setdefault(name, []).append(t)
            table[(backend, pipeline)] = times
    return {"table": table, "training": _training(quick, rounds, layout, plan),
            "bandwidth": _bandwidth(rounds, plan),
            "load_once": _load_once(quick, rounds) if jax.process_count() > 1 else {},
            "process": jax.process_index()}


def _training(quick: bool, rounds: int, layout, plan) -> dict:
    """A step as costly as loading (cheap pipelines): recipe + step against jaxload p2 + step,
    with jaxload's time breakdown from loader.stats()."""
    import jax

    import jaxload

    out = {}
    warmup, steps = _steps("cheap", quick)
    num = ROWS * (warmup + steps + 2)
    put = " device_put" if jax.process_count() == 1 else ""
    for backend, recipe in (("tf", "batch().prefetch()" + put), ("grain", "MapDataset.batch" + put)):
        load = statistics.median(
            _time_steps(_method(recipe, backend, "cheap", num, layout, plan), steps, warmup)
            for _ in range(rounds))
        runs: dict[str, list] = {"recipe": [], "jaxload p2": [], "stats": []}
        for _ in range(rounds):
            runs["recipe"].append(_time_steps(
                _method(recipe, backend, "cheap", num, layout, plan), steps, warmup, load))
            if backend == "tf":
                loader = jaxload.from_tf_data(_tf_source("cheap", num, plan), layout, shard=False,
                                              global_batch_size=ROWS)
            else:
                loader = jaxload.from_grain(_grain_source("cheap", num), layout,
                                            global_batch_size=ROWS)
            runs["jaxload p2"].append(_time_steps(iter(loader), steps, warmup, load))
            runs["stats"].append(loader.stats().as_dict())
        out[backend] = {"load": load, **runs}
    return out


def _bandwidth(rounds: int, plan) -> dict:
    """Assembly against a numpy copy of the same bytes (per process)."""
    import jax
    import numpy as np

    import jaxload
    from jaxload._src.assemble import aligned_empty

    out = {}
    for name, nbytes in (("3 MiB", 3 * 2**20), ("48 MiB", 48 * 2**20)):
        rows = plan.local_batch_size
        local = {"x": aligned_empty((rows, nbytes // (ROWS * 4)), np.float32)}
        local["x"][:] = 1
        dest = np.empty_like(local["x"])
        copy, assemble = [], []
        for _ in range(5 * rounds):
            start = time.perf_counter()
            np.copyto(dest, local["x"])
            copy.append(time.perf_counter() - start)
            start = time.perf_counter()
            jax.block_until_ready(jaxload.assemble(local, plan))
            assemble.append(time.perf_counter() - start)
        size = local["x"].nbytes
        out[name] = (size / statistics.median(copy), size / statistics.median(assemble))
    return out


def _load_once(quick: bool, rounds: int) -> dict:
    """Replicas across all processes (one loading group): every process loads every row, or
    each loads its half and the batch is resharded on device (load_once=True)."""
    import jax
    import tensorflow as tf

    import jaxload

    layout = jaxload.model_replicas_across_processes(jax.process_count())
    out = {}
    for pipeline in PIPELINES:
        warmup, steps = _steps(pipeline, quick)
        num = ROWS * (warmup + steps + 2)
        for _ in range(rounds):
            for once in (False, True):
                plan = layout.load_once_plan(ROWS) if once else layout.plan(ROWS)
                ds = _tf_source(pipeline, num * plan.shard_count, plan)
                loader = jaxload.from_tf_data(ds, layout, global_batch_size=ROWS, shard=False,
                                              load_once=once)
                out.setdefault((pipeline, once), []).append(
                    _time_steps(iter(loader), steps, warmup))
    del tf
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _cell(values: list[float] | None) -> str:
    if not values:
        return "n/a"
    return f"{_ms(statistics.median(values))} ({_ms(min(values))}-{_ms(max(values))})"


def _slowest(results: list[dict], key, name) -> list[float] | None:
    """Per round, the slowest process's time: the step time the job sees."""
    series = [r["table"][key].get(name) for r in results]
    if any(s is None for s in series):
        return None
    return [max(values) for values in zip(*series, strict=True)]


def _main_table(by_topology: dict[str, list[dict]]) -> list[str]:
    lines = []
    for backend in ("grain", "tf"):
        recipes = GRAIN_RECIPES if backend == "grain" else TF_RECIPES
        ours = JAXLOAD + (JAXLOAD_THREADS if backend == "grain" else ())
        head = ["topology", "pipeline", *recipes, *ours, "best recipe",
                *(f"{m} / best" for m in ours)]
        lines += ["", f"### {'Grain' if backend == 'grain' else 'tf.data'}", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for topology, results in by_topology.items():
            for pipeline in PIPELINES:
                key = (backend, pipeline)
                cells = {m: _slowest(results, key, m) for m in recipes + ours}
                medians = {m: statistics.median(v) for m, v in cells.items() if v}
                best = min((m for m in recipes if m in medians), key=medians.get)
                ratios = [f"{medians[m] / medians[best]:.2f}" if m in medians else "n/a"
                          for m in ours]
                lines.append("| " + " | ".join([topology, pipeline,
                                               *(_cell(cells[m]) for m in recipes + ours),
                                               best, *ratios]) + " |")
    return lines


def _training_table(by_topology: dict[str, list[dict]]) -> list[str]:
    lines = ["", "## A training step as costly as loading (cheap pipelines)", "",
             "The step is a sleep of the fastest recipe's measured load time after the batch is "
             "ready (the host waiting on an accelerator). Hand-written pays load + step; with "
             "prefetch jaxload should approach max(load, step) = load. The breakdown is "
             "`loader.stats()` of the jaxload run (ms per step; `wait` is the loop's time in "
             "`next(loader)`, the other parts run on the prefetch thread), slowest process.", "",
             "| topology | backend | load (ms) | recipe + step (ms) | jaxload p2 + step (ms) | "
             "jaxload / max(load, step) | wait | backend | agree | assemble | check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for topology, results in by_topology.items():
        for backend in ("grain", "tf"):
            worst = max(results, key=lambda r: statistics.median(r["training"][backend]["jaxload p2"]))
            t = worst["training"][backend]
            ours = statistics.median(t["jaxload p2"])
            parts = [statistics.median(s[f"{p}_ms_per_step"] for s in t["stats"])
                     for p in ("wait", "backend", "agree", "assemble", "check")]
            lines.append(f"| {topology} | {backend} | {_ms(t['load'])} | "
                         f"{_ms(statistics.median(t['recipe']))} | {_ms(ours)} | "
                         f"{ours / t['load']:.2f} | " + " | ".join(f"{p:.2f}" for p in parts) + " |")
    return lines


def report(by_topology: dict[str, list[dict]], quick: bool, elapsed: float) -> str:
    lines = ["# jaxload benchmarks", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}; local CPU processes with fake devices "
             "(XLA_FLAGS=--xla_force_host_platform_device_count). "
             f"{'Quick run. ' if quick else ''}Wall time {elapsed:.0f} s.", "",
             f"Per-step time in ms for a global batch of {ROWS} rows (32x32x3 float32 image, int32 "
             "label; 3 MiB), data parallel: the time of a pass of "
             f"{_pass_steps('cheap', quick)} (cheap) or {_pass_steps('costly', quick)} (costly) "
             "steps (a quarter of that for `grain.DataLoader`, 30x slower per step) from the "
             "iterator's creation to the last batch ready, divided by the steps "
             "(start-up counts: threads, worker processes, what a thread pool builds ahead while "
             "the first batch is awaited); median over interleaved rounds, slowest process; in "
             "brackets the spread (min-max over rounds). "
             "`cheap`: a lookup per element; `costly`: about 0.2 ms of numpy (Grain) or TF "
             "(tf.data) work per element. `device_put`: the recipe with one `jax.device_put` of "
             "the whole batch (1 process only); the other recipes call "
             "`make_array_from_process_local_data` per feature. Ratios: jaxload / the fastest "
             "recipe of the row, same run. `threads`: `read_options=grain.ReadOptions("
             f"num_threads={THREADS})`.", "", "## jaxload against the hand-written recipes"]
    lines += _main_table(by_topology)
    lines += _training_table(by_topology)
    lines += ["", "## Assembly bandwidth against a numpy copy of the same bytes (per process)", "",
              "| topology | batch | numpy copy (GB/s) | jaxload._src.assemble (GB/s) | ratio |",
              "|---|---|---|---|---|"]
    for topology, results in by_topology.items():
        for size, (copy, assemble) in results[0]["bandwidth"].items():
            lines.append(f"| {topology} | {size} | {copy / 1e9:.2f} | {assemble / 1e9:.2f} | "
                         f"{assemble / copy:.2f} |")
    multi = {t: r for t, r in by_topology.items() if r[0]["load_once"]}
    if multi:
        lines += ["", "## Load once and reshard (replicas across processes, tf.data)", "",
                  "One model replica spans all processes, so every process needs every row. "
                  "Per-step time (ms, slowest process, jaxload p2) when each process loads every "
                  "row, and with `load_once=True` (each loads its share; a jitted reshard on "
                  "device completes the batch).", "",
                  "| topology | pipeline | every process loads all | load_once | ratio |",
                  "|---|---|---|---|---|"]
        for topology, results in multi.items():
            for pipeline in PIPELINES:
                cells = [[max(v) for v in zip(*(r["load_once"][(pipeline, once)]
                                                 for r in results), strict=True)]
                         for once in (False, True)]
                ratio = statistics.median(cells[1]) / statistics.median(cells[0])
                lines.append(f"| {topology} | {pipeline} | {_cell(cells[0])} | "
                             f"{_cell(cells[1])} | {ratio:.2f} |")
    lines += ["", "No GPU was available for these runs, so host-to-device transfer to a GPU is not "
              "measured here."]
    return "\n".join(lines) + "\n"


SCALE_SECTION = "<!-- agreement_scale.py: the section below is written by that script -->"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--topologies", default="1x8,2x4")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results.md"))
    args = parser.parse_args()
    start = time.monotonic()
    by_topology = {}
    for topology in args.topologies.split(","):
        processes, devices = map(int, topology.split("x"))
        by_topology[topology] = jaxload.testing.run(
            measure, num_processes=processes, local_devices=devices, args=(args.quick,),
            timeout_s=900)
    text = report(by_topology, args.quick, time.monotonic() - start)
    out = Path(args.out)
    if out.exists() and SCALE_SECTION in out.read_text():  # agreement_scale.py's, kept
        text += "\n" + SCALE_SECTION + out.read_text().split(SCALE_SECTION, 1)[1]
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
