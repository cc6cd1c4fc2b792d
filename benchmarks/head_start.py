"""Time to the first batch after a restore, with and without the head start of ``set_state``.

A tf.data pipeline whose reading starts with a 200 ms open (a generator that sleeps before its
first element, as opening remote files would) is restored from a state taken after 2 steps;
the loop then spends ``RESTORE_S`` restoring the model (a sleep) before asking for its first
batch. Without the head start the pass starts at that first ``next()``: the open, the first
read, the step agreement and the assembly all fall on the loop. With it (``set_state`` with
``prefetch`` > 0) they happen while the model is restored. Measured in N processes x D CPU
devices, alternately with and without, over several rounds; the table gives the median time of
the slowest process from the first ``next()`` to its batch.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/head_start.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from sections import publish

import jaxload
import jaxload.testing

SECTION = "<!-- head_start.py -->"
OPEN_S = 0.2
RESTORE_S = 0.5
ROWS, GLOBAL_BATCH = 4096, 64


def dataset():
    import tensorflow as tf

    def rows():
        time.sleep(OPEN_S)  # the open
        for i in range(ROWS):
            yield {"x": np.full(256, i, np.float32), "id": np.int32(i)}

    spec = {"x": tf.TensorSpec((256,), tf.float32), "id": tf.TensorSpec((), tf.int32)}
    return tf.data.Dataset.from_generator(rows, output_signature=spec)


def first_batch_after_restore(rounds: int) -> dict[str, list[float]]:
    """Worker side: per round, the seconds from the first ``next()`` to its batch, both ways."""
    layout = jaxload.data_parallel()
    taken = jaxload.from_tf_data(dataset(), layout, global_batch_size=GLOBAL_BATCH)
    with iter(taken) as batches:
        next(batches), next(batches)
        state = taken.get_state()
    times: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(rounds):
        for way in ("without", "with"):
            loader = jaxload.from_tf_data(dataset(), layout, global_batch_size=GLOBAL_BATCH)
            loader.set_state(state, head_start=way == "with")
            time.sleep(RESTORE_S)  # the model state is restored meanwhile
            start = time.perf_counter()
            with iter(loader) as batches:
                batch = next(batches)
                batch["x"].block_until_ready()
                times[way].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results.md"))
    args = parser.parse_args()
    rounds = 3 if args.quick else 7
    lines = [SECTION, "", "## The first batch after a restore: the head start", "",
             f"A tf.data pipeline with a {OPEN_S * 1e3:.0f} ms open before its first element "
             f"(global batch {GLOBAL_BATCH}, data parallel, prefetch 2), restored from a state "
             f"after 2 steps; the loop restores its model for {RESTORE_S * 1e3:.0f} ms (a sleep) "
             "and then asks for the first batch. Time from that `next()` to the batch, median "
             f"over {rounds} rounds (in brackets min-max), slowest process:", "",
             "| topology | without head start (ms) | with head start (ms) | with / without |",
             "|---|---|---|---|"]
    for processes, devices in ((1, 8), (2, 4)):
        results = jaxload.testing.run(first_batch_after_restore, num_processes=processes,
                                      local_devices=devices, args=(rounds,), timeout_s=300)
        cells = []
        for way in ("without", "with"):
            slowest = [max(r[way][i] for r in results) for i in range(rounds)]
            cells.append((statistics.median(slowest), min(slowest), max(slowest)))
        (off, *_), (on, *_) = cells
        lines.append(f"| {processes}x{devices} | "
                     + " | ".join(f"{m * 1e3:.1f} ({lo * 1e3:.1f}-{hi * 1e3:.1f})"
                                  for m, lo, hi in cells) + f" | {on / off:.2f} |")
    publish(Path(args.out), SECTION, lines)


if __name__ == "__main__":
    main()
