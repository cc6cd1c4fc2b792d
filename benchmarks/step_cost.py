"""jaxload's own CPU per process and step, by part, against the hand recipe on a near-free
tf.data pipeline; the pass after its first batch as a ratio to the recipe; the first batch's
delay; what the iterator saves cost.

The pipeline: ``Dataset.range(steps x global batch).map(lambda i: {"id": i, "x": fill([16],
i)})``, global batch 64 (16 rows per process at 4x2), a pass of 256 steps, data parallel at
1 x 8, 2 x 4 and 4 x 2 local CPU processes. The map costs next to nothing, so what jaxload adds
per step (agreement, iterator saves, validation, thread hand-offs, assembly) is most of what
is measured.

- **recipe**: ``ds.shard(K, k).batch(local, drop_remainder=True).prefetch(AUTOTUNE)``, then
  ``jax.make_array_from_process_local_data`` per feature;
- **jaxload**: ``from_tf_data(ds, layout, global_batch_size=64)`` (a ``range`` is sharded by
  elements: ``ds.shard(K, k)``, as the recipe), prefetch 2.

Each process's CPU over a pass (``time.process_time``: all its threads) from building the
pipeline to the last batch, median of interleaved rounds; *own CPU per step* is jaxload's minus
the recipe's, divided by the steps. The parts are CPU time (``time.thread_time``) of the thread
that runs them, summed over the pass: *agreement* (``Pass._decide``: the rounds, including
parsing and deciding), *save* (tf.data's iterator saves), *validation* (``ReadAhead._validated``),
*hand-offs* (the prefetch queue's put and get), *assembly* (``build_global``); *read*
(``next()`` of tf.data's iterator and its conversion to numpy) is in the recipe too. Wall
time: the pass after its first batch (slowest process), jaxload's over the recipe's, and the
first batch's delay (jaxload's first batch minus the recipe's, from building the pipeline).
*Save share*: the saves' CPU time (by which jaxload spaces them) and their wall time (which a
preemption inside a save inflates) over the pass's wall time (the reading thread lives
through the pass).

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/step_cost.py [--quick] [--topologies 1x8,2x4,4x2]
"""

from __future__ import annotations

import functools
import statistics
import time
import warnings
from pathlib import Path

from sections import arguments, ended, publish, timed_loop

import jaxload
import jaxload.testing

SECTION = "<!-- step_cost.py -->"
STEPS, GLOBAL_BATCH = 256, 64
PARTS = ("agreement", "save", "validation", "hand-offs", "assembly", "read", "reading thread",
         "loop thread")
METHODS = ("recipe", "jaxload")


class Parts:
    """CPU seconds of the thread that runs each wrapped function, summed (wall for saves)."""

    def __init__(self) -> None:
        self.cpu = dict.fromkeys(PARTS, 0.0)
        self.save_wall = 0.0

    def wrap(self, owner, name: str, part: str) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.cpu[part] += time.thread_time() - cpu
                if part == "save":
                    self.save_wall += time.perf_counter() - wall

        setattr(owner, name, timed)

    def reads(self, owner, name: str) -> None:
        """Times each ``next()`` of the generator ``owner.name`` returns, less its saves."""
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def counted(*args, **kwargs):
            items = inner(*args, **kwargs)
            while True:
                cpu, saves = time.thread_time(), self.cpu["save"]
                item = next(items, None)
                self.cpu["read"] += time.thread_time() - cpu - (self.cpu["save"] - saves)
                if item is None:
                    return
                yield item

        setattr(owner, name, counted)

    def reset(self) -> None:
        self.cpu = dict.fromkeys(PARTS, 0.0)
        self.save_wall = 0.0


def _instrument() -> Parts:
    from jaxload._src import iterator, passes, prefetch
    from jaxload._src.pipelines.tf import dataset as tfdata
    from jaxload._src.pipelines.tf import iterator as tf_iterator
    from jaxload._src.read_ahead import ReadAhead

    parts = Parts()
    parts.wrap(passes.Pass, "_decide", "agreement")
    parts.wrap(tf_iterator, "_save", "save")
    parts.wrap(ReadAhead, "_validated", "validation")
    parts.wrap(prefetch.Prefetched, "_offer", "hand-offs")
    parts.wrap(prefetch, "_next_ready", "hand-offs")
    parts.wrap(passes, "build_global", "assembly")
    parts.reads(tfdata, "checkpointed")
    parts.wrap(prefetch, "_produce", "reading thread")
    parts.wrap(iterator.LoaderIterator, "__next__", "loop thread")
    return parts


def _pipeline():
    import tensorflow as tf

    return tf.data.Dataset.range(STEPS * GLOBAL_BATCH).map(
        lambda i: {"id": i, "x": tf.fill([16], tf.cast(i, tf.float32))})


def _batches(method: str, layout, plan, parts: Parts):
    import jax
    import tensorflow as tf

    if method == "jaxload":
        return jaxload.from_tf_data(_pipeline(), layout, global_batch_size=GLOBAL_BATCH)
    local = _pipeline().shard(plan.shard_count, plan.shard_index).batch(
        plan.local_batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def read(items):
        while True:
            cpu = time.thread_time()
            b = next(items, None)
            parts.cpu["read"] += time.thread_time() - cpu
            if b is None:
                return
            yield b

    def assembled(b):
        cpu = time.thread_time()
        out = {k: jax.make_array_from_process_local_data(
            layout.sharding, v, (GLOBAL_BATCH,) + v.shape[1:]) for k, v in b.items()}
        parts.cpu["assembly"] += time.thread_time() - cpu
        return out

    return (assembled(b) for b in read(local.as_numpy_iterator()))


def _pass(method: str, layout, plan, parts: Parts) -> dict:
    """One pass, every process starting it together: wall and CPU seconds, the first batch's
    time, the parts."""
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"step_cost {method}")
    parts.reset()
    timed = timed_loop(lambda: _batches(method, layout, plan, parts))
    assert timed["steps"] == STEPS, (method, timed)
    return {**timed, "parts": dict(parts.cpu), "save wall": parts.save_wall}


def measure(rounds: int) -> dict:
    """Worker side: per method, each round's pass."""
    layout = jaxload.data_parallel()
    plan = layout.plan(GLOBAL_BATCH)
    warnings.simplefilter("ignore")
    parts = _instrument()
    for method in METHODS:  # compiles the puts, warms TensorFlow
        _pass(method, layout, plan, parts)
    out: dict = {m: [] for m in METHODS}
    for r in range(rounds):
        for method in METHODS if r % 2 == 0 else reversed(METHODS):
            out[method].append(_pass(method, layout, plan, parts))
    return out


def _median(results: list[dict], method: str, key, slowest: bool = False) -> float:
    """Median over rounds of ``key(pass)``: of the slowest process, or the processes' mean."""
    per_round = [[key(r[method][i]) for r in results] for i in range(len(results[0][method]))]
    return statistics.median(max(v) if slowest else statistics.fmean(v) for v in per_round)


def rows(topology: str, results: list[dict]) -> list[str]:
    def ms_step(method, key):
        return 1e3 * _median(results, method, key) / STEPS

    own = ms_step("jaxload", lambda p: p["cpu"]) - ms_step("recipe", lambda p: p["cpu"])
    parts = [ms_step("jaxload", lambda p, part=part: p["parts"][part]) for part in PARTS]
    recipe_parts = [ms_step("recipe", lambda p, part=part: p["parts"][part])
                    for part in ("assembly", "read")]
    after = (_median(results, "jaxload", lambda p: p["after first"], slowest=True)
             / _median(results, "recipe", lambda p: p["after first"], slowest=True))
    delay = 1e3 * (_median(results, "jaxload", lambda p: p["first"], slowest=True)
                   - _median(results, "recipe", lambda p: p["first"], slowest=True))
    share = _median(results, "jaxload", lambda p: p["parts"]["save"] / p["wall"])
    share_wall = _median(results, "jaxload", lambda p: p["save wall"] / p["wall"])
    return [f"| {topology} | {ms_step('recipe', lambda p: p['cpu']):.2f} | "
            f"{ms_step('jaxload', lambda p: p['cpu']):.2f} | **{own:.2f}** | "
            + " | ".join(f"{v:.3f}" for v in parts)
            + f" | {recipe_parts[0]:.3f} / {recipe_parts[1]:.3f} | {after:.2f} | {delay:.0f} | "
            f"{share:.2%} / {share_wall:.2%} |"]


def main() -> None:
    args = arguments()
    rounds = 3 if args.quick else 7
    started = time.perf_counter()
    lines = ["| topology | recipe CPU ms/step | jaxload CPU ms/step | own CPU ms/step | "
             + " | ".join(f"{p} ms/step" for p in PARTS)
             + " | recipe assembly / read ms/step | after the first batch / recipe | first "
             "batch delay (ms) | save share of the pass, CPU / wall |",
             "|---|" + "---|" * (len(PARTS) + 7)]
    for topology in args.topologies.split(","):
        processes, devices = map(int, topology.split("x"))
        lines += rows(topology, jaxload.testing.run(
            measure, num_processes=processes, local_devices=devices, args=(rounds,),
            timeout_s=900))
    publish(Path(args.out), SECTION, [
        SECTION, "", "## jaxload's own CPU per step, by part", "",
        f"A near-free tf.data map (`range` -> `{{id, x: fill([16])}}`), global batch "
        f"{GLOBAL_BATCH}, a pass of {STEPS} steps, data parallel; CPU per process and step "
        f"(`time.process_time`, the mean of the processes, median of {rounds} interleaved "
        "rounds): the recipe's, jaxload's, and jaxload's own (the difference). The parts: "
        "jaxload's CPU per step in each (`time.thread_time` of the thread that runs it); "
        "*read* (tf.data's `next()` and the numpy conversion) and *assembly* are work the "
        "recipe does too (its own in the next column). The pass after its first batch, "
        "slowest process, over the recipe's; the first batch's delay against the recipe's; "
        "the iterator saves' share of the pass: their CPU time (by which jaxload spaces them) "
        "and their wall time (which a preemption inside a save inflates) over the pass's "
        "wall time.", "", *lines, "", ended(started)])


if __name__ == "__main__":
    main()
