"""A tf.data pipeline that reads files, resumed at 10%, 50% and 90% of an epoch: the time to
the first batch, and the state's bytes.

The pipeline is the usual one: ``list_files`` (32 TFRecord files of 512 records, 1 KiB of
bytes each) -> ``interleave(TFRecordDataset, num_parallel_calls=AUTOTUNE)`` -> ``map(parse and
a little arithmetic on the decoded bytes, AUTOTUNE)``, global batch 128, data parallel, in
N processes x D CPU devices (sharded by files). A state is taken at each position, and a fresh
loader restored from it (``set_state(head_start=False)``) is timed from its first ``next()`` to
the batch, median over rounds, slowest process. Two ways:

- **checkpointed**: jaxload's default, tf.data's own iterator checkpoint restored;
- **skipped**: the same pipeline with a ``py_function`` whose state tf.data cannot save, which
  falls back to skipping every batch before the position (what jaxload did before).

The state's bytes per process (``len(json.dumps(state))``) are given for this pipeline and for
one with a 10 000-element ``shuffle`` buffer after the parse.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/tf_resume.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from sections import write_section

import jaxload
import jaxload.testing

SECTION = "<!-- tf_resume.py -->"
FILES, RECORDS, GLOBAL_BATCH = 32, 512, 128
POSITIONS = (0.1, 0.5, 0.9)


def write_files(directory: str) -> str:
    import numpy as np
    import tensorflow as tf

    for f in range(FILES):
        with tf.io.TFRecordWriter(f"{directory}/part-{f:03d}.tfrecord") as writer:
            for r in range(RECORDS):
                i = f * RECORDS + r
                features = {
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "data": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[np.full(1024, i % 251, np.uint8).tobytes()]))}
                writer.write(tf.train.Example(features=tf.train.Features(
                    feature=features)).SerializeToString())
    return f"{directory}/*.tfrecord"


def pipeline(pattern: str, way: str, shuffle: int = 0):
    import tensorflow as tf

    def parse(serialized):
        e = tf.io.parse_single_example(serialized, {
            "id": tf.io.FixedLenFeature([], tf.int64), "data": tf.io.FixedLenFeature([], tf.string)})
        x = tf.cast(tf.io.decode_raw(e["data"], tf.uint8), tf.float32)
        for _ in range(4):
            x = tf.tanh(x * 0.01)
        return {"id": e["id"], "x": tf.reshape(x, [32, 32])[:, :8]}

    files = tf.data.Dataset.list_files(pattern, shuffle=False)
    ds = files.interleave(tf.data.TFRecordDataset, cycle_length=4,
                          num_parallel_calls=tf.data.AUTOTUNE)
    if way == "skipped":
        ds = ds.map(lambda s: tf.ensure_shape(tf.py_function(lambda a: a, [s], tf.string), []))
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.shuffle(shuffle, seed=1) if shuffle else ds


def resume_times(pattern: str, rounds: int) -> dict:
    """Worker side: per way and position, the seconds to the first batch after set_state; the
    state's bytes."""
    layout, out = jaxload.data_parallel(), {}
    warnings.simplefilter("ignore")
    steps = FILES * RECORDS // GLOBAL_BATCH
    for way in ("checkpointed", "skipped"):
        taken = jaxload.from_tf_data(pipeline(pattern, way), layout, global_batch_size=GLOBAL_BATCH)
        states, batches = {}, iter(taken)
        for step in range(1, steps):
            next(batches)
            for p in POSITIONS:
                if step == round(p * steps):
                    states[p] = taken.get_state()
        batches.close()
        for p, state in states.items():
            times = []
            for _ in range(rounds):
                loader = jaxload.from_tf_data(pipeline(pattern, way), layout,
                                              global_batch_size=GLOBAL_BATCH)
                loader.set_state(state, head_start=False)
                started = time.perf_counter()
                next(iter(loader))["x"].block_until_ready()
                times.append(time.perf_counter() - started)
                loader.close()
            out[(way, p)] = times
        out[(way, "bytes")] = len(json.dumps(states[0.5]))
    shuffled = jaxload.from_tf_data(pipeline(pattern, "checkpointed", shuffle=10_000), layout,
                                    global_batch_size=GLOBAL_BATCH)
    batches = iter(shuffled)
    for _ in range(steps // 2):
        next(batches)
    out[("shuffle", "bytes")] = len(json.dumps(shuffled.get_state()))
    batches.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results.md"))
    args = parser.parse_args()
    rounds = 3 if args.quick else 5
    lines = [SECTION, "", "## tf.data: the first batch after a resume, and the state's size", "",
             f"{FILES} TFRecord files x {RECORDS} records (1 KiB each), list_files -> parallel "
             f"interleave -> parse and map, global batch {GLOBAL_BATCH}, data parallel, sharded "
             "by files; a fresh loader restored at a position of the epoch, time from its first "
             f"`next()` to the batch, median of {rounds} rounds (min-max), slowest process. "
             "*checkpointed*: tf.data's iterator checkpoint restored (the default); *skipped*: "
             "the same pipeline with a `py_function` tf.data cannot save, which skips the "
             "batches before the position.", "",
             "| topology | way | " + " | ".join(f"at {p:.0%} (ms)" for p in POSITIONS)
             + " | 90% / 10% | state bytes per process |",
             "|---|---|" + "---|" * len(POSITIONS) + "---|---|"]
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_files(directory)
        for processes, devices in ((1, 8), (2, 4)):
            results = jaxload.testing.run(resume_times, num_processes=processes,
                                          local_devices=devices, args=(pattern, rounds),
                                          timeout_s=600)
            for way in ("checkpointed", "skipped"):
                cells = []
                for p in POSITIONS:
                    slowest = [max(r[(way, p)][i] for r in results) for i in range(rounds)]
                    cells.append((statistics.median(slowest), min(slowest), max(slowest)))
                lines.append(f"| {processes}x{devices} | {way} | " + " | ".join(
                    f"{m * 1e3:.0f} ({lo * 1e3:.0f}-{hi * 1e3:.0f})" for m, lo, hi in cells)
                    + f" | {cells[-1][0] / cells[0][0]:.2f} | "
                    f"{max(r[(way, 'bytes')] for r in results):,} |")
            lines.append(f"| {processes}x{devices} | with shuffle(10 000) | | | | | "
                         f"{max(r[('shuffle', 'bytes')] for r in results):,} |")
    text = "\n".join(lines) + "\n"
    write_section(Path(args.out), SECTION, text)
    print(text)


if __name__ == "__main__":
    main()
