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

Then the tutorials' form of the same pipeline, whose ``list_files`` shuffles the file names (its
default, without a seed) under the shuffle of the records. jaxload rebuilds both shuffles for
each pass (``names_shuffle`` in jaxload/_src/pipelines/tf/shuffle.py), so that its state is a
few counts (*replay*). With that rebuild turned off, the pipeline is positioned by tf.data's
iterator checkpoints, which hold the records' shuffle buffer, as any shuffle jaxload does not
replay: *taken when asked*, as jaxload takes them now (jaxload/_src/pipelines/tf/on_demand.py:
nothing saved as the pass runs, the checkpoint and the batches read ahead taken by
``get_state()``), and *saved as it runs*, as before: after the first batches, then spaced by
their cost. Added: the largest of the three states' bytes (as JSON, the buffers inline) and one
``get_state()`` at 50% of the pass. The pass includes the four ``get_state()`` calls (the three
states, the timed one).

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


def user(pattern: str, buffer: int, names: bool = False):
    """The pipeline; ``names``: ``list_files`` shuffles the file names (its default)."""
    import tensorflow as tf

    return tf.data.Dataset.list_files(pattern, shuffle=names).interleave(
        tf.data.TFRecordDataset, cycle_length=4).map(
        parse, num_parallel_calls=tf.data.AUTOTUNE).shuffle(buffer, seed=1)


CHECKPOINTED = ("running", "asked")  # positioned by tf.data's iterator checkpoints


@contextlib.contextmanager
def variant(name: str):
    """``"under"``: the replay with the decode left under the shuffle; ``"asked"``: the names'
    shuffle not rebuilt (the pipeline is not replayed); ``"running"``: nor are its checkpoints
    taken on demand (saved as the pass runs); else jaxload as it is."""
    from jaxload._src.pipelines.tf import dataset, replay, shuffle

    moved, found, live = replay.Replay.peels, replay.names_shuffle, dataset.Live
    if name == "under":
        replay.Replay.peels = property(lambda self: False)
    if name in CHECKPOINTED:
        replay.names_shuffle = shuffle.names_shuffle = lambda ds: None
    if name == "running":
        dataset.Live = lambda: None
    try:
        yield
    finally:
        replay.Replay.peels, replay.names_shuffle = moved, found
        shuffle.names_shuffle, dataset.Live = found, live


def one_round(pattern: str, buffer: int, name: str) -> dict:
    layout = jaxload.data_parallel()
    names = name in (*CHECKPOINTED, "replayed")
    with variant(name):
        start = time.perf_counter()
        loader = jaxload.from_tf_data(user(pattern, buffer, names), layout,
                                      global_batch_size=BATCH)
        states, rows, first, got = {}, [], None, 0.0
        steps = 32  # 4,096 records
        for step, batch in enumerate(loader):
            if first is None:
                first = time.perf_counter() - start
            rows.append(np.asarray(batch["id"]).tolist())
            if step + 1 == 16:
                begun = time.perf_counter()
                loader.get_state()
                got = time.perf_counter() - begun
            if step + 1 in (int(steps * at) for at in AT):
                states[step + 1] = loader.get_state()
        whole = time.perf_counter() - start
        assert len(rows) == steps
        assert ("saved" in states[16]["position"]) == (name in CHECKPOINTED)
        resumed, sizes = {}, []
        for at in AT:
            stop = int(len(rows) * at)
            state = json.loads(json.dumps(states[stop]))
            sizes.append(len(json.dumps(state)))
            again = jaxload.from_tf_data(user(pattern, buffer, names), layout,
                                         global_batch_size=BATCH)
            begun = time.perf_counter()
            again.set_state(state, head_start=False)
            batches = iter(again)
            batch = next(batches)
            resumed[at] = time.perf_counter() - begun
            after = [np.asarray(batch["id"]).tolist()] + [np.asarray(b["id"]).tolist()
                                                          for b in batches]
            assert after == rows[stop:], f"a resume at {at:.0%} gave other rows"
    return {"pass": whole, "first": first, "resumed": resumed, "bytes": max(sizes),
            "rows": rows, "get_state": got}


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
    columns = ("| shuffle buffer | {} | pass (ms) | first batch (ms) | resumed at 10% (ms) | "
               "at 50% (ms) | at 90% (ms) | 90% / 10% | state bytes | get_state (ms) |")
    rule = "|---|---|---|---|---|---|---|---|---|---|"
    tables = {("under", "over"): [columns.format("decode"), rule],
              (*CHECKPOINTED, "replayed"): [columns.format("positioned by"), rule]}
    labels = {"under": "as written (under)", "over": "moved over", "replayed": "replay",
              "running": "checkpoints saved as it runs", "asked": "checkpoints taken when asked"}
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_files(directory)
        for buffer in buffers:
            for pair, table in tables.items():
                results: dict[str, list[dict]] = {name: [] for name in pair}
                for _ in range(rounds):
                    for name in pair:
                        results[name].append(one_round(pattern, buffer, name))
                if pair == ("under", "over"):
                    assert results["under"][0]["rows"] == results["over"][0]["rows"], "other rows"
                for name in pair:
                    got = results[name]
                    resumed = [statistics.median(r["resumed"][at] for r in got) for at in AT]
                    table.append(
                        f"| {buffer:,} | {labels[name]} | {_cell([r['pass'] for r in got])} | "
                        f"{_cell([r['first'] for r in got])} | "
                        + " | ".join(_cell([r["resumed"][at] for r in got]) for at in AT)
                        + f" | {resumed[2] / resumed[0]:.2f} | {max(r['bytes'] for r in got):,}"
                        f" | {_cell([r['get_state'] for r in got])} |")
    lines = [SECTION, "", "## A shuffle of decoded images: the decode moved over the shuffle", "",
             "\n\n".join(told[:4]), "", *tables[("under", "over")], "",
             "Both give the same rows in the same order, and each resume the rows after its "
             "position (asserted).", "", " ".join(__doc__.split("\n\n")[5].split("\n")), "",
             *tables[(*CHECKPOINTED, "replayed")], "", ended(began)]
    publish(Path(args.out), SECTION, lines)


if __name__ == "__main__":
    main()
