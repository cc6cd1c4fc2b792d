"""tf.data that reads files: what each process parses, the time of a pass against the hand
recipe, and the first batch after a resume at 10%, 50% and 90% of an epoch.

The pipeline is the usual one, with a real cost per record: ``list_files`` (32 TFRecord files of
128 records, each a JPEG-encoded 96x96 image and an id) -> ``interleave(TFRecordDataset,
num_parallel_calls=AUTOTUNE)`` -> ``map(parse_single_example, decode_jpeg, resize to 64x64,
normalize; AUTOTUNE)`` (about 0.5 ms per record on one core here), global batch 128, data
parallel, at 1 process x 8 CPU devices, 2 x 4 and 4 x 2 (K = 1, 2, 4 loading groups).

A pass (32 steps), timed from building the pipeline to the last batch ready, median over
interleaved rounds, slowest process:

- **recipe**: what a user writes by hand, ``list_files(shuffle=False).shard(K, k)`` before the
  interleave, ``batch(local, drop_remainder=True).prefetch(AUTOTUNE)``, then
  ``jax.make_array_from_process_local_data`` per feature (with one process also
  ``jax.device_put`` of the whole batch, the faster of the two there);
- **jaxload**: ``from_tf_data(ds, layout, global_batch_size=128)`` on the pipeline as written
  (``shard="auto"``: by files);
- **jaxload buffers**: the same with ``options.experimental_symbolic_checkpoint = False``
  (tf.data's checkpoints then hold the buffers; a symbolic one costs tf.data time per element);
- **jaxload elements**: the same with ``shard="elements"`` (every process parses every record
  and keeps 1/K: what jaxload did for every pipeline before it sharded by files).

Records parsed per process are counted in a separate, untimed pass of each (a ``py_function``
counter after the parse). The resume part takes a state at each position and times a fresh
loader restored from it (``set_state(head_start=False)``) from its first ``next()`` to the
batch: *checkpointed* (tf.data's iterator checkpoint, jaxload's default) against *skipped* (the
same pipeline with a ``py_function`` tf.data cannot save, which falls back to skipping every
batch before the position), and *buffers* (``experimental_symbolic_checkpoint = False``).
The state's bytes per process (``len(json.dumps(state))``) are
given for this pipeline and for one with a 10 000-element ``shuffle`` buffer of the records.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/tf_files.py [--quick] [--topologies 1x8,2x4,4x2]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from sections import ended, first_batches_after, publish, timed_loop

import jaxload
import jaxload.testing

SECTION = "<!-- tf_files.py -->"
FILES, RECORDS, GLOBAL_BATCH, SIDE = 32, 128, 128, 64
POSITIONS = (0.1, 0.5, 0.9)
READS = ("interleave", "parallel interleave")
WAYS = (("interleave, checkpointed", "interleave", False),
        ("parallel interleave, checkpointed", "parallel interleave", False),
        ("parallel interleave, buffers", "parallel interleave", "buffers"),
        ("interleave, skipped", "interleave", True))
METHODS = ("recipe", "recipe device_put", "jaxload", "jaxload buffers", "jaxload elements")
STEPS = FILES * RECORDS // GLOBAL_BATCH


def write_files(directory: str) -> str:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:96, 0:96]
    for f in range(FILES):
        with tf.io.TFRecordWriter(f"{directory}/part-{f:03d}.tfrecord") as writer:
            for r in range(RECORDS):
                i = f * RECORDS + r
                image = np.stack([(x + i) % 256, (2 * y + i) % 256, (x + y + 3 * i) % 256], -1)
                image = np.clip(image + rng.integers(0, 32, image.shape), 0, 255).astype(np.uint8)
                features = {
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[tf.io.encode_jpeg(image, quality=90).numpy()]))}
                writer.write(tf.train.Example(features=tf.train.Features(
                    feature=features)).SerializeToString())
    return f"{directory}/*.tfrecord"


PARSED = [0]  # records parsed by this process, in a counting pass


def _count(serialized):
    PARSED[0] += 1
    return serialized


def parse(serialized):
    """A record's id and its JPEG decoded, resized to SIDE x SIDE and scaled to [-1, 1]."""
    import tensorflow as tf

    e = tf.io.parse_single_example(serialized, {
        "id": tf.io.FixedLenFeature([], tf.int64),
        "image": tf.io.FixedLenFeature([], tf.string)})
    image = tf.image.resize(tf.image.decode_jpeg(e["image"], channels=3), [SIDE, SIDE],
                            antialias=True)
    return {"id": e["id"], "image": image / 127.5 - 1.0}


def pipeline(pattern: str, reads: str, *, shard: tuple[int, int] | None = None,
             count: bool = False, unsaveable: bool | str = False, shuffle: int = 0):
    """The user's pipeline, reading the files with ``reads`` (one of ``READS``);
    ``shard=(K, k)``: the recipe's ``shard`` of the file names; ``unsaveable="buffers"``:
    checkpointed with its buffers (``experimental_symbolic_checkpoint = False``), True: not
    at all (a ``py_function``)."""
    import tensorflow as tf

    def counted(serialized):
        return tf.ensure_shape(tf.py_function(_count, [serialized], tf.string), [])

    files = tf.data.Dataset.list_files(pattern, shuffle=False)
    if shard:
        files = files.shard(*shard)
    ds = files.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=(
        tf.data.AUTOTUNE if reads == "parallel interleave" else None))
    if shuffle:
        ds = ds.repeat().shuffle(shuffle, seed=1)
    if count or unsaveable is True:
        ds = ds.map(counted)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if unsaveable == "buffers":
        options = tf.data.Options()
        options.experimental_symbolic_checkpoint = False
        ds = ds.with_options(options)
    return ds


def _batches(method: str, reads: str, pattern: str, layout, plan, count: bool = False):
    """An iterable of global batches, the way ``method`` makes them."""
    import jax
    import tensorflow as tf

    if method.startswith("jaxload"):
        shard = "elements" if method.endswith("elements") else "auto"
        ds = pipeline(pattern, reads, count=count,
                      unsaveable="buffers" if method.endswith("buffers") else False)
        return jaxload.from_tf_data(ds, layout, shard=shard, global_batch_size=GLOBAL_BATCH)
    ds = pipeline(pattern, reads, shard=(plan.shard_count, plan.shard_index), count=count)
    local = ds.batch(plan.local_batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    if method.endswith("device_put"):
        return (jax.device_put(b, layout.sharding) for b in local.as_numpy_iterator())
    return ({k: jax.make_array_from_process_local_data(
        layout.sharding, v, (GLOBAL_BATCH,) + v.shape[1:]) for k, v in b.items()}
        for b in local.as_numpy_iterator())


def _pass(method: str, reads: str, pattern: str, layout, plan, count: bool = False
          ) -> tuple[float, float, float]:
    """Seconds of a whole pass, from building the pipeline to the last batch ready, of its
    part after the first batch, and the CPU seconds this process spent on it (all its threads);
    every process starts it together (else jaxload's first agreement would count the time
    another process still spent on the previous pass). The end of the data, after the last
    batch, is not timed: a loop over ``as_numpy_iterator()`` destroys the tf.data iterator in
    the ``next()`` that finds the end, which cancels and joins its threads (up to 0.6 s here, in
    about a third of passes), and the training loop would have had its last batch before."""
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"tf_files {method} {reads}")
    timed = timed_loop(lambda: _batches(method, reads, pattern, layout, plan, count))
    assert timed["steps"] == STEPS, (method, timed)
    return timed["wall"], timed["after first"], timed["cpu"]


def _methods() -> tuple[str, ...]:
    import jax

    return METHODS if jax.process_count() == 1 else tuple(
        m for m in METHODS if not m.endswith("device_put"))


def passes(pattern: str, rounds: int) -> dict:
    """Worker side: per (reads, method), the seconds of each round's pass and the records
    parsed."""
    layout = jaxload.data_parallel()
    plan = layout.plan(GLOBAL_BATCH)
    warnings.simplefilter("ignore")
    out: dict = {"parsed": {}, "time": {}, "after first": {}, "cpu": {}}
    for reads in READS:
        for method in _methods():
            PARSED[0] = 0
            _pass(method, reads, pattern, layout, plan, count=True)  # also compiles the puts
            out["parsed"][reads, method] = PARSED[0]
        for r in range(rounds):  # interleaved, in alternating order
            for method in _methods() if r % 2 == 0 else reversed(_methods()):
                whole, after_first, cpu = _pass(method, reads, pattern, layout, plan)
                out["time"].setdefault((reads, method), []).append(whole)
                out["after first"].setdefault((reads, method), []).append(after_first)
                out["cpu"].setdefault((reads, method), []).append(cpu)
    return out


def _first_batches(make, rounds: int) -> dict:
    """A state at each position of a pass, and per position the seconds from a fresh loader's
    first ``next()`` after ``set_state`` to its batch; ``"bytes"``: the state's at 50%."""
    taken, states, out = make(), {}, {}
    batches = iter(taken)
    for step in range(1, STEPS):
        next(batches)
        for p in POSITIONS:
            if step == round(p * STEPS):
                states[p] = taken.get_state()
    batches.close()
    out.update(first_batches_after(make, states, rounds))
    out["bytes"] = len(json.dumps(states[0.5]))
    # the batches a resume reads again: those after the state's last iterator save
    out["reread"] = max((s["position"]["batches"] - s["position"]["saved"]["batches"]
                         if isinstance(s["position"], dict) else 0) for s in states.values())
    return out


def resume_times(pattern: str, rounds: int) -> dict:
    """Worker side: per way, the seconds to the first batch after set_state at each position;
    the state's bytes."""
    layout, out = jaxload.data_parallel(), {}
    warnings.simplefilter("ignore")
    for way, reads, unsaveable in WAYS:
        out[way] = _first_batches(functools.partial(
            lambda r, u: jaxload.from_tf_data(pipeline(pattern, r, unsaveable=u), layout,
                                              global_batch_size=GLOBAL_BATCH), reads, unsaveable),
            rounds)
    shuffled = jaxload.from_tf_data(pipeline(pattern, READS[0], shuffle=10_000), layout,
                                    global_batch_size=GLOBAL_BATCH)
    batches = iter(shuffled)
    for _ in range(STEPS // 2):
        next(batches)
    out["shuffle"] = {"bytes": len(json.dumps(shuffled.get_state()))}
    batches.close()
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f}"


def _cell(values: list[float]) -> str:
    return f"{_ms(statistics.median(values))} ({_ms(min(values))}-{_ms(max(values))})"


def _slowest(series: list[list[float]]) -> list[float]:
    """Per round, the slowest process's time: the time the job sees."""
    return [max(values) for values in zip(*series, strict=True)]


def pass_rows(topology: str, results: list[dict]) -> list[str]:
    lines = []
    for reads in READS:
        keys = [key for key in results[0]["time"] if key[0] == reads]
        times = {m: _slowest([r["time"][reads, m] for r in results]) for _, m in keys}
        after = {m: _slowest([r["after first"][reads, m] for r in results]) for _, m in keys}
        cpu = {m: [sum(c) for c in zip(*(r["cpu"][reads, m] for r in results), strict=True)]
               for _, m in keys}  # per round, all processes together
        medians = {m: statistics.median(v) for m, v in times.items()}
        best = min((m for m in medians if m.startswith("recipe")), key=medians.get)
        fastest = min(min(times[m]) for m in times if m.startswith("recipe"))
        steady = min(statistics.median(after[m]) for m in after if m.startswith("recipe"))
        least = min(statistics.median(cpu[m]) for m in cpu if m.startswith("recipe"))
        first = {m: statistics.median(_slowest([[w - a for w, a in zip(
            r["time"][reads, m], r["after first"][reads, m], strict=True)] for r in results]))
            for _, m in keys}  # the first batch, from building the pipeline
        recipe_first = min(first[m] for m in first if m.startswith("recipe"))
        lines += [f"| {topology} | {reads} | {m} | {_cell(times[m])} | "
                  + (f"{medians[m] / medians[best]:.2f} | {min(times[m]) / fastest:.2f} | "
                     f"{statistics.median(after[m]) / steady:.2f}"
                     if m.startswith("jaxload") else " | | ")
                  + f" | {_ms(statistics.median(cpu[m]))}"
                  + (f" ({statistics.median(cpu[m]) / least:.2f})" if m.startswith("jaxload")
                     else "")
                  + f" | {_ms(first[m])}"
                  + (f" ({_ms(first[m] - recipe_first)})" if m.startswith("jaxload") else "")
                  + f" | {max(r['parsed'][reads, m] for r in results):,} |" for m in times]
    return lines


def resume_rows(topology: str, results: list[dict]) -> list[str]:
    lines = []
    for way, _, _ in WAYS:
        cells = [_slowest([r[way][p] for r in results]) for p in POSITIONS]
        lines.append(f"| {topology} | {way} | " + " | ".join(_cell(c) for c in cells)
                     + f" | {statistics.median(cells[-1]) / statistics.median(cells[0]):.2f} | "
                     f"{max(r[way]['reread'] for r in results)} | "
                     f"{max(r[way]['bytes'] for r in results):,} |")
    lines.append(f"| {topology} | interleave, shuffle(10 000) | | | | | | "
                 f"{max(r['shuffle']['bytes'] for r in results):,} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--topologies", default="1x8,2x4,4x2")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results.md"))
    args = parser.parse_args()
    rounds = 3 if args.quick else 9
    started = time.perf_counter()
    pass_lines = ["| topology | reads | method | pass (ms) | / best recipe (medians) | / best "
                  "recipe (fastest rounds) | / best recipe after the first batch (medians) | "
                  "CPU ms, all processes (/ least recipe) | first batch (ms; - best recipe's) | "
                  "records parsed per process |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
    resume_lines = ["| topology | pipeline, resumed | " + " | ".join(
        f"at {p:.0%} (ms)" for p in POSITIONS) + " | 90% / 10% | batches re-read, at most | "
        "state bytes per process |",
        "|---|---|" + "---|" * len(POSITIONS) + "---|---|---|"]
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_files(directory)
        for topology in args.topologies.split(","):
            processes, devices = map(int, topology.split("x"))
            kwargs = dict(num_processes=processes, local_devices=devices,
                          args=(pattern, rounds), timeout_s=900)
            pass_lines += pass_rows(topology, jaxload.testing.run(passes, **kwargs))
            resume_lines += resume_rows(topology, jaxload.testing.run(resume_times, **kwargs))
    lines = [SECTION, "", "## tf.data that reads files: what each process parses, a pass, and "
             "the first batch after a resume", "",
             f"{FILES} TFRecord files x {RECORDS} records (a JPEG-encoded 96x96 image and an id), "
             "list_files -> interleave(TFRecordDataset, cycle_length=4) (*interleave*: "
             "sequential; *parallel interleave*: `num_parallel_calls=AUTOTUNE`) -> "
             f"map(parse, decode_jpeg, resize to {SIDE}x{SIDE}, normalize; AUTOTUNE) (about "
             f"0.5 ms per record), global batch {GLOBAL_BATCH}, data parallel (K = the number "
             f"of processes). A pass of {STEPS} steps from building the pipeline to the last "
             f"batch ready (not the end of the data after it: a recipe's loop destroys the "
             "tf.data iterator in the `next()` that finds the end, up to 0.6 s of joining its "
             f"threads), median of {rounds} interleaved rounds (min-max), slowest process; "
             "the ratios: jaxload's median over the fastest recipe's, and jaxload's fastest round "
             "over the recipes' fastest (this machine's noise only ever adds time), and the same "
             "for the pass after its first batch "
             "(what a long pass converges to: the first batch carries the start, jaxload's "
             "first agreement round and its check of the first step); the CPU time of the pass, "
             "all threads of all processes (median; `time.process_time`, which this machine's "
             "idle spells and other tenants do not inflate), and its ratio to the recipe with "
             "the least; the first batch, from building the pipeline (slowest process, "
             "median), and jaxload's delay over the recipe with the earliest; records parsed "
             "per process counted in a separate pass. *recipe*: "
             "`list_files(shuffle=False).shard(K, k)`, batch, prefetch, "
             "`make_array_from_process_local_data` per feature (*device_put*: of the whole "
             "batch, one process only); *jaxload*: `from_tf_data` on the pipeline as written "
             "(sharded by files; its checkpoint symbolic); *jaxload buffers*: the same with "
             "`options.experimental_symbolic_checkpoint = False` (checkpoints with the "
             "buffers); *jaxload elements*: `shard=\"elements\"`.", "", *pass_lines, "",
             "A fresh loader restored at a position of the epoch: time from its first `next()` "
             f"to the batch, median of {rounds} rounds (min-max), slowest process. "
             "*checkpointed*: tf.data's iterator checkpoint restored (the default, symbolic: "
             "the parallel interleave is rebuilt as a sequential one whose open files each read "
             "ahead on their own thread, since TensorFlow 2.21's symbolic checkpoint of a "
             "parallel interleave grows with every file it has read); *buffers*: with "
             "`experimental_symbolic_checkpoint = False`, tf.data's checkpoint with its buffers, "
             "saved, as the symbolic one, whenever 100 save-costs (CPU) of time have passed; "
             "*skipped*: the same pipeline with a "
             "`py_function` tf.data cannot save, which skips the batches before the position. "
             "Batches re-read: the most, over the positions and processes, read since the "
             "state's last iterator save (a resume reads them again). "
             "State bytes: `len(json.dumps(state))` at 50%; *shuffle(10 000)*: the records "
             "repeated and shuffled with a 10 000-element buffer before the parse.", "",
             *resume_lines, "", ended(started)]
    publish(Path(args.out), SECTION, lines)


if __name__ == "__main__":
    main()
