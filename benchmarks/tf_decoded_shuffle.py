"""A shuffle of decoded images: the decode moved over the shuffle, against the pipeline as written.

The user's pipeline decodes under its shuffle, as many write it:

    list_files -> interleave(TFRecordDataset) -> map(parse, decode_jpeg, resize) -> shuffle(B, seed)

(benchmarks/tf_files.py's 32 files x 128 records, about 0.5 ms a record). jaxload positions it by
replay (jaxload/_src/pipelines/tf/replay.py) and runs the stateless decode over the shuffle
(jaxload/_src/pipelines/tf/shuffle.py): the same rows in the same order, checked here. *as
written*: the same loader with the decode left under the shuffle (how the replay ran before),
so that a resume decodes every record before its position again.

One process, one CPU device, global batch 128, one pass (32 steps): the pass from building the
loader to its last batch, its first batch, and the first batch of a fresh loader restored at
10%, 50% and 90% of the pass (from its `set_state` to the batch); median of 3 interleaved rounds
(min-max). Writes (or replaces) its section of benchmarks/results.md.

Run: .venv/bin/python benchmarks/tf_decoded_shuffle.py [--quick]
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from sections import arguments, ended, publish
from tf_files import parse, write_files

import jaxload

SECTION = "<!-- tf_decoded_shuffle.py -->"
BATCH = 128
AT = (0.1, 0.5, 0.9)


def user(pattern: str, buffer: int):
    import tensorflow as tf

    return tf.data.Dataset.list_files(pattern, shuffle=False).interleave(
        tf.data.TFRecordDataset, cycle_length=4).map(
        parse, num_parallel_calls=tf.data.AUTOTUNE).shuffle(buffer, seed=1)


@contextlib.contextmanager
def as_written(on: bool):
    """The replay with the decode left under the shuffle (``on``)."""
    from jaxload._src.pipelines.tf import replay

    moved = replay.Replay.peels
    if on:
        replay.Replay.peels = property(lambda self: False)
    try:
        yield
    finally:
        replay.Replay.peels = moved


def one_round(pattern: str, buffer: int, written: bool) -> dict:
    layout = jaxload.data_parallel()
    with as_written(written):
        start = time.perf_counter()
        loader = jaxload.from_tf_data(user(pattern, buffer), layout, global_batch_size=BATCH)
        states, rows, first = [], [], None
        for batch in loader:
            if first is None:
                first = time.perf_counter() - start
            rows.append(np.asarray(batch["id"]).tolist())
            states.append(loader.get_state())
        whole = time.perf_counter() - start
        resumed, sizes = {}, []
        for at in AT:
            stop = int(len(rows) * at)
            state = json.loads(json.dumps(states[stop - 1]))
            sizes.append(len(json.dumps(state)))
            again = jaxload.from_tf_data(user(pattern, buffer), layout, global_batch_size=BATCH)
            begun = time.perf_counter()
            again.set_state(state, head_start=False)
            batches = iter(again)
            batch = next(batches)
            resumed[at] = time.perf_counter() - begun
            after = [np.asarray(batch["id"]).tolist()] + [np.asarray(b["id"]).tolist()
                                                          for b in batches]
            assert after == rows[stop:], f"a resume at {at:.0%} gave other rows"
    return {"pass": whole, "first": first, "resumed": resumed, "bytes": max(sizes),
            "rows": rows}


def _cell(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.0f} ({min(ms):.0f}-{max(ms):.0f})"


def main() -> None:
    args = arguments()
    began = time.perf_counter()
    rounds = 1 if args.quick else 3
    buffers = (2_000,) if args.quick else (2_000, 10_000)
    told = [part if part.startswith("    ") else part.replace("\n", " ")
            for part in __doc__.split("\n\n")[1:5]]
    lines = [SECTION, "", "## A shuffle of decoded images: the decode moved over the shuffle", "",
             "\n\n".join(told), "",
             "| shuffle buffer | decode | pass (ms) | first batch (ms) | resumed at 10% (ms) | "
             "at 50% (ms) | at 90% (ms) | 90% / 10% | state bytes |",
             "|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_files(directory)
        for buffer in buffers:
            results: dict[bool, list[dict]] = {False: [], True: []}
            for _ in range(rounds):
                for written in (True, False):
                    results[written].append(one_round(pattern, buffer, written))
            assert results[True][0]["rows"] == results[False][0]["rows"], "other rows"
            for written in (True, False):
                got = results[written]
                resumed = [statistics.median(r["resumed"][at] for r in got) for at in AT]
                lines.append(
                    f"| {buffer:,} | {'as written (under)' if written else 'moved over'} | "
                    f"{_cell([r['pass'] for r in got])} | {_cell([r['first'] for r in got])} | "
                    + " | ".join(_cell([r["resumed"][at] for r in got]) for at in AT)
                    + f" | {resumed[2] / resumed[0]:.2f} | {max(r['bytes'] for r in got):,} |")
    lines += ["", "Both give the same rows in the same order, and each resume the rows after its "
              "position (asserted).", "", ended(began)]
    publish(Path(args.out), SECTION, lines)


if __name__ == "__main__":
    main()
