"""The tutorials' file pipeline, whose file names are shuffled: replayed, against the iterator
checkpoints it had before (which carry the records' shuffle buffer).

    list_files(pattern) -> interleave(TFRecordDataset) -> map(parse, decode_jpeg, resize)
                        -> shuffle(B, seed=1)

``list_files`` shuffles the names (without a seed, its default). jaxload rebuilds both shuffles
for each pass (jaxload/_src/pipelines/tf/shuffle.py: ``names_shuffle``), so the state is a few
counts; *checkpointed*: the same loader with that rebuild turned off, positioned by tf.data's
iterator checkpoints as before, which hold the records' shuffle buffer and are saved after the
first batches and then spaced by their cost.

benchmarks/tf_files.py's 32 files x 128 JPEG records; one process, one CPU device, global batch
128, one pass (32 steps): the pass from building the loader to its last batch (the saves
included), the state's bytes at 50% of the pass, what one ``get_state()`` costs there, and the
first batch of a fresh loader restored at 10% and 90% (from its ``set_state`` to the batch);
median of 3 interleaved rounds (min-max). Each resume gives the rows after its position
(asserted). Writes (or replaces) its section of benchmarks/results.md.

Run: .venv/bin/python benchmarks/tf_names_shuffle.py [--quick]
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

SECTION = "<!-- tf_names_shuffle.py -->"
BATCH = 128
AT = (0.1, 0.5, 0.9)


def user(pattern: str, buffer: int):
    import tensorflow as tf

    return tf.data.Dataset.list_files(pattern).interleave(
        tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE).map(
        parse, num_parallel_calls=tf.data.AUTOTUNE).shuffle(buffer, seed=1)


@contextlib.contextmanager
def checkpointed(on: bool):
    """The names' shuffle not rebuilt (``on``): the pipeline is not replayed."""
    from jaxload._src.pipelines.tf import replay, shuffle

    found = replay.names_shuffle
    if on:
        replay.names_shuffle = shuffle.names_shuffle = lambda ds: None
    try:
        yield
    finally:
        replay.names_shuffle = shuffle.names_shuffle = found


def one_round(pattern: str, buffer: int, old: bool) -> dict:
    layout = jaxload.data_parallel()
    with checkpointed(old):
        start = time.perf_counter()
        loader = jaxload.from_tf_data(user(pattern, buffer), layout, global_batch_size=BATCH)
        states, rows, got = [], [], None
        for step, batch in enumerate(loader):
            rows.append(np.asarray(batch["id"]).tolist())
            states.append(loader.get_state())
            if step + 1 == 16:
                begun = time.perf_counter()
                loader.get_state()
                got = time.perf_counter() - begun
        whole = time.perf_counter() - start
        assert ("saved" in states[0]["position"]) == old
        resumed = {}
        for at in AT:
            stop = int(len(rows) * at)
            state = json.loads(json.dumps(states[stop - 1]))
            again = jaxload.from_tf_data(user(pattern, buffer), layout, global_batch_size=BATCH)
            begun = time.perf_counter()
            again.set_state(state, head_start=False)
            batches = iter(again)
            batch = next(batches)
            resumed[at] = time.perf_counter() - begun
            after = [np.asarray(batch["id"]).tolist()] + [np.asarray(b["id"]).tolist()
                                                          for b in batches]
            assert after == rows[stop:], f"a resume at {at:.0%} gave other rows"
    return {"pass": whole, "get_state": got, "resumed": resumed,
            "bytes": len(json.dumps(states[len(rows) // 2 - 1]))}


def _cell(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.0f} ({min(ms):.0f}-{max(ms):.0f})"


def main() -> None:
    args = arguments()
    began = time.perf_counter()
    rounds = 1 if args.quick else 3
    buffers = (2_000,) if args.quick else (2_000, 4_000)
    told = [part if part.startswith("    ") else part.replace("\n", " ")
            for part in __doc__.split("\n\n")[1:4]]
    lines = [SECTION, "", "## The tutorials' file pipeline: file names shuffled, then records", "",
             "\n\n".join(told), "",
             "| shuffle buffer | positioned by | pass (ms) | state bytes at 50% | get_state (ms) | "
             "resumed at 10% (ms) | at 90% (ms) |", "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_files(directory)
        for buffer in buffers:
            results: dict[bool, list[dict]] = {False: [], True: []}
            for _ in range(rounds):
                for old in (True, False):
                    results[old].append(one_round(pattern, buffer, old))
            for old in (True, False):
                got = results[old]
                lines.append(
                    f"| {buffer:,} | {'iterator checkpoints' if old else 'replay'} | "
                    f"{_cell([r['pass'] for r in got])} | "
                    f"{statistics.median(r['bytes'] for r in got):,.0f} | "
                    f"{_cell([r['get_state'] for r in got])} | "
                    + " | ".join(_cell([r["resumed"][at] for r in got]) for at in (0.1, 0.9))
                    + " |")
    lines += ["", ended(began)]
    publish(Path(args.out), SECTION, lines)


if __name__ == "__main__":
    main()
