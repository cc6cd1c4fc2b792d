"""The benchmark matrix: the pipelines users write, jaxload against the fastest hand recipe.

Each row times an epoch, from building the pipeline (the loader, or the recipe's pipeline) to
the last batch ready, including the first batch: *kept*, one loader built once and iterated over
3 epochs; *per epoch*, one built for each of the 3 epochs. Slowest process, median of
interleaved rounds (min-max), at 1 process x 8 CPU devices, 2 x 4 and 4 x 2, data parallel.
jaxload is given each pipeline as the user writes it, unsharded and unbatched; the recipe is the
fastest a user of that backend writes for K processes: it shards first, batches with
``drop_remainder=True``, prefetches, and makes the global batch with
``jax.make_array_from_process_local_data`` per feature.

- *tf.data in memory*: 4,096 images of 32x32x3 float32 (48 MB) and a label,
  ``from_tensor_slices``, optionally ``shuffle(4096, seed=1)`` and a random-augmenting ``map``
  (benchmarks/tf_memory.py's pipelines), global batch 128.
- *tf.data files*: 32 TFRecord files of 128 JPEG records (benchmarks/tf_files.py's),
  ``list_files -> interleave(TFRecordDataset) -> map(parse: decode_jpeg, resize) ->
  shuffle(10_000, seed=1)``, at 16 and at 128 rows per process and step. The recipe shuffles the
  serialized records and parses after the shuffle (the fastest order; jaxload moves the parse over
  the shuffle itself).
- *Grain MapDataset*: the same arrays as a source, ``shuffle(seed=1)`` and a random-augmenting
  ``map`` (numpy), global batch 128; the recipe ``ds[k::K]``, batched, read by index.
- *grain.DataLoader, 2 workers*: the same source and augmentation as operations, its sampler
  shuffled and sharded (``jaxload.grain_shard_options``), global batch 128; each epoch starts
  the workers again (as a DataLoader's iterator does), on both sides.

Per row, jaxload's state in the middle of the second epoch of a kept loader: its bytes as JSON
(the largest process's) and what ``get_state()`` costs, the first time (which hashes what a
restore checks the pipeline by, once per loader) and the next.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/matrix.py [--quick] [--topologies 1x8,2x4,4x2]
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import grain
import tf_memory
from matrix_data import Augment, Source, arrays, augment
from sections import arguments, ended, ms_cell, publish, slowest
from tf_files import FILES, RECORDS, parse, write_files

import jaxload
import jaxload.testing

SECTION = "<!-- matrix.py -->"
EPOCHS, BUFFER, N = 3, 10_000, tf_memory.N
GLOBAL = 128  # the global batch of the rows that do not give rows per process
ROWS = (("tf.data in memory", "from_tensor_slices", None),
        ("tf.data in memory", "+ shuffle", None),
        ("tf.data in memory", "+ shuffle + map", None),
        ("tf.data files", "shuffle(10,000)", 16),  # rows per process and step
        ("tf.data files", "shuffle(10,000)", 128),
        ("Grain MapDataset", "shuffle + map", None),
        ("grain.DataLoader, 2 workers", "shuffle + map", None))
def _files(pattern: str, shard: tuple[int, int] | None = None):
    """The file pipeline; with ``shard``, the recipe's (shuffled before the parse)."""
    import tensorflow as tf

    names = tf.data.Dataset.list_files(pattern, shuffle=False)
    if shard is None:
        return names.interleave(tf.data.TFRecordDataset, cycle_length=4).map(
            parse, num_parallel_calls=tf.data.AUTOTUNE).shuffle(BUFFER, seed=1)
    return names.shard(*shard).interleave(tf.data.TFRecordDataset, cycle_length=4).shuffle(
        BUFFER, seed=1).map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def _data_loader(layout, size: int, shard_options):
    sampler = grain.samplers.IndexSampler(num_records=N, num_epochs=1, shuffle=True, seed=1,
                                          shard_options=shard_options)
    plan = layout.plan(size)
    return grain.DataLoader(data_source=Source(), sampler=sampler, worker_count=2, operations=[
        Augment(), grain.transforms.Batch(plan.local_batch_size, drop_remainder=True)])


def _jaxload(row: tuple[str, str, int], pattern: str, layout, size: int):
    kind, name, _ = row
    if kind == "tf.data in memory":
        ds = tf_memory.pipeline(name, arrays())
    elif kind == "tf.data files":
        ds = _files(pattern)
    elif kind == "Grain MapDataset":
        return jaxload.from_grain(grain.MapDataset.source(Source()).shuffle(seed=1).map(augment),
                                  layout, global_batch_size=size)
    else:
        return jaxload.from_grain(_data_loader(layout, size, jaxload.grain_shard_options(
            layout, size)), layout, global_batch_size=size)
    return jaxload.from_tf_data(ds, layout, global_batch_size=size)


def _recipe(row: tuple[str, str, int], pattern: str, layout, size: int):
    """A function giving one epoch's global batches, the recipe's way."""
    import jax
    import tensorflow as tf

    kind, name, _ = row
    plan = layout.plan(size)
    shard = (plan.shard_count, plan.shard_index)
    if kind == "tf.data in memory":
        return tf_memory._recipe(name, arrays(), layout, plan)
    if kind == "tf.data files":
        local = _files(pattern, shard).batch(plan.local_batch_size, drop_remainder=True).prefetch(
            tf.data.AUTOTUNE)
        batches = local.as_numpy_iterator
    elif kind == "Grain MapDataset":
        ds = grain.MapDataset.source(Source())[shard[1]::shard[0]].shuffle(seed=1).map(
            augment).batch(plan.local_batch_size, drop_remainder=True)

        def batches():
            return (ds[i] for i in range(len(ds)))
    else:
        loader = _data_loader(layout, size, grain.sharding.ShardOptions(
            shard[1], shard[0], drop_remainder=True))
        batches = loader.__iter__

    def epoch():
        return ({k: jax.make_array_from_process_local_data(
            layout.sharding, v, (size,) + v.shape[1:]) for k, v in b.items()} for b in batches())
    return epoch


def _epochs(method: str, kept: bool, row, pattern: str, layout, size: int) -> float:
    """Seconds of 3 epochs, from building to the last batch ready of the third."""
    import jax
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"matrix {method} {kept} {row}")
    started, make, steps = time.perf_counter(), None, []
    for _ in range(EPOCHS):
        if make is None or not kept:
            make = (_recipe(row, pattern, layout, size) if method == "recipe"
                    else _jaxload(row, pattern, layout, size).__iter__)
        count = 0
        for batch in make():
            jax.block_until_ready(batch)
            count += 1
        steps.append(count)
    assert len(set(steps)) == 1 and steps[0] > 0, (method, row, steps)
    return time.perf_counter() - started


def _state(row, pattern: str, layout, size: int) -> tuple[int, float, float]:
    """A kept loader's state in the middle of its second epoch: its bytes, the seconds of its
    first get_state() and of the next one."""
    loader = _jaxload(row, pattern, layout, size)
    for _ in loader:
        pass
    batches = iter(loader)
    steps = N // size
    for _ in range(max(steps // 2, 1)):
        next(batches)
    took = []
    for _ in range(2):  # the first hashes what the state checks on restore, once per loader
        started = time.perf_counter()
        state = loader.get_state()
        took.append(time.perf_counter() - started)
    batches.close()
    return len(json.dumps(state)), *took


def cells(rounds: int, pattern: str) -> dict:
    """Worker side: per row and loader, each round's seconds for both methods; the states."""
    import jax
    from absl import flags

    flags.FLAGS.mark_as_parsed()  # grain.DataLoader's workers read absl flags (no app.run here)
    warnings.simplefilter("ignore")
    layout, out = jaxload.data_parallel(), {}
    for method in ("recipe", "jaxload"):  # untimed: TensorFlow's and XLA's first use
        _epochs(method, True, ROWS[0], pattern, layout, GLOBAL)
    for row in ROWS:
        size = row[2] * jax.process_count() if row[2] else GLOBAL
        for kept in (True, False):
            for r in range(rounds):
                for method in ("recipe", "jaxload") if r % 2 == 0 else ("jaxload", "recipe"):
                    out.setdefault(f"{row}|{kept}|{method}", []).append(
                        _epochs(method, kept, row, pattern, layout, size))
        out[f"{row}|state"] = _state(row, pattern, layout, size)
    return out


def lines_of(topology: str, results: list[dict]) -> list[str]:
    lines, processes = [], len(results)
    for row in ROWS:
        batch = f"{row[2] * processes} ({row[2]} a process)" if row[2] else str(GLOBAL)
        if f"{row}|state" not in results[0]:
            lines.append(f"| {topology} | {row[0]} | {row[1]} | {batch} | | n/a | n/a | | | |")
            continue
        size, first, then = (max(r[f"{row}|state"][i] for r in results) for i in range(3))
        for kept in (True, False):
            times = {m: slowest(results, f"{row}|{kept}|{m}") for m in ("recipe", "jaxload")}
            ratio = statistics.median(times["jaxload"]) / statistics.median(times["recipe"])
            lines.append(
                f"| {topology} | {row[0]} | {row[1]} | {batch} | "
                f"{'kept' if kept else 'per epoch'} | {ms_cell(times['recipe'], EPOCHS)} | "
                f"{ms_cell(times['jaxload'], EPOCHS)} | {ratio:.2f} | {size:,} | "
                f"{first * 1e3:.2f} / {then * 1e3:.2f} |")
    return lines


def main() -> None:
    args = arguments()
    rounds = 2 if args.quick else 3
    began = time.perf_counter()
    table = ["| topology | pipeline | shape | global batch | loader | recipe, ms an "
             "epoch | jaxload, ms an epoch | jaxload / recipe | state bytes per process | "
             "get_state, first / next (ms) |", "|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_files(directory)
        for topology in args.topologies.split(","):
            processes, devices = map(int, topology.split("x"))
            table += lines_of(topology, jaxload.testing.run(
                cells, num_processes=processes, local_devices=devices, args=(rounds, pattern),
                timeout_s=3000))
    told = [" ".join(part.split("\n")) if not part.startswith("- ") else part
            for part in __doc__.split("\n\n")[1:5]]
    publish(Path(args.out), SECTION, [
        SECTION, "", "## The matrix: the pipelines users write, against the fastest recipe", "",
        *told[:1], "", told[1], "", told[2], "", *table, "", ended(began)])


assert FILES * RECORDS == N  # the files hold as many records as the arrays
if __name__ == "__main__":
    main()
