"""The cost of the run-time check that every process splits the same tf.data order.

Each process describes what it splits once per loader (jaxload/_src/pipelines/tf/probe.py), and
the descriptions ride the first round of each pass:

- sharded by files: the file names dealt out, hashed while the loader counts them (which it did
  before the check); timed against counting alone, as the loader did before;
- sharded by elements: the pipeline's ops (always, from the graph), and where the graph cannot
  show the order (a generator, an interleave whose cycle length is the machine's CPU count), its
  first 16 elements, read with a second iterator from its start and hashed.

Both are timed here on benchmarks/tf_files.py's pipeline (32 TFRecord files x 128 records, each a
JPEG decoded and resized, about 0.5 ms a record), in one process, against a pass of the same
pipeline read by one process of 2 loading groups (its share by files, every record by elements:
what each process reads at 2x4). The file-name hash is also timed on longer lists. Median of 5
rounds. Writes (or replaces) its section of benchmarks/results.md.

Run: .venv/bin/python benchmarks/order_check.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from sections import publish
from tf_files import GLOBAL_BATCH, pipeline, write_files

import jaxload

SECTION = "<!-- order_check.py -->"
ROUNDS = 5


def _median_ms(fn) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _names_ms(ds, plan) -> tuple[float, float, float]:
    """(counted and hashed, counted alone, the files-read check) ms: each round rebuilds the
    names' datasets. The files-read check reads the names the group's file reads are given and
    those of the unsharded pipeline's (multisets.names_read), compared in the first round."""
    import tensorflow as tf

    from jaxload._src import compat
    from jaxload._src.pipelines.tf import multisets
    from jaxload._src.pipelines.tf import names as tf_names

    graph = compat.tf_shard_graph(compat.tf_graph(ds), plan.shard_count, plan.shard_index,
                                  tf.data.experimental.AutoShardPolicy.FILE)
    nodes = {node.name: node for node in graph.node}

    def counted() -> None:
        for name in tf_names.inserted_shards(graph):
            names = tf_names._names(graph, nodes[name].input[0].split(":")[0], nodes[name])
            sum(1 for _ in names)

    whole = compat.tf_graph(ds)
    return (_median_ms(lambda: tf_names.file_names(graph)), _median_ms(counted),
            _median_ms(lambda: (multisets.names_read(graph), multisets.names_read(whole))))


def _pass_ms(ds, plan) -> float:
    def read():
        for _ in ds.batch(plan.local_batch_size).prefetch(2):
            pass
    return _median_ms(read)


def main() -> None:
    import tensorflow as tf

    from jaxload._src.pipelines.tf.graph import DatasetGraph
    from jaxload._src.pipelines.tf.order import structure, unseen_order
    from jaxload._src.pipelines.tf.probe import Probe
    from jaxload._src.pipelines.tf.split import Sharding

    plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4)).plan(
        global_batch_size=GLOBAL_BATCH, process_index=0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pattern = write_files(tmp)
        ds = pipeline(pattern, "interleave")
        share = pipeline(pattern, "interleave", shard=(2, 0))
        files_pass, elements_pass = _pass_ms(share, plan), _pass_ms(ds, plan)
        hashed, counted, proof = _names_ms(ds, plan)
        graph = DatasetGraph.of(ds)
        probe = _median_ms(lambda: Probe(pipeline(pattern, "interleave"), plan,
                                         Sharding("elements"), batched=False,
                                         unseen=unseen_order(graph) or ["forced"],
                                         structure=structure(graph)).described())
        ops = _median_ms(lambda: structure(DatasetGraph.of(ds)))
        rows.append(("by files: 32 file names counted and hashed, once per loader", hashed,
                     files_pass, f"{counted:.1f} counted alone"))
        rows.append(("by files: the names the group's file reads are given and the unsharded "
                     "pipeline's, counted and hashed as multisets (the groups' must add up), "
                     "once per loader", proof, files_pass, ""))
        rows.append(("by elements, the graph shows the order: the pipeline's ops hashed (the "
                     "graph read again here; a loader reads it once)", ops, elements_pass, ""))
        rows.append(("by elements, the graph cannot show the order: and the first 16 elements "
                     "read again and hashed, once per loader", probe, elements_pass,
                     f"unseen here: {', '.join(unseen_order(graph)) or 'nothing'}"))
        for n in (10_000, 100_000):
            listed = tf.data.Dataset.from_tensor_slices(
                [f"{tmp}/part-{i:07d}.tfrecord" for i in range(n)]).interleave(
                tf.data.TFRecordDataset)
            hashed, counted, proof = _names_ms(listed, plan)
            rows.append((f"by files: {n:,} file names counted and hashed", hashed, None,
                         f"{counted:.1f} counted alone; the files-read check {proof:.1f}"))
    lines = [SECTION, "## The run-time check of the order: what it costs a loader",
             "",
             "benchmarks/tf_files.py's pipeline (32 files x 128 JPEG records, about 0.5 ms a "
             f"record), global batch {GLOBAL_BATCH}, one process of 2 loading groups; median of "
             f"{ROUNDS} rounds. *pass*: that process reading its records of one pass (its 16 "
             "files by files, all 4,096 records by elements), batched, without jaxload.",
             "", "| check | ms | pass (ms) | share of a pass | note |", "|---|---|---|---|---|"]
    for what, ms, of, note in rows:
        share_text = f"{100 * ms / of:.2f}%" if of else ""
        lines.append(f"| {what} | {ms:.1f} | {f'{of:.0f}' if of else ''} | {share_text} | "
                     f"{note} |")
    publish(Path(__file__).parent / "results.md", SECTION, lines)


if __name__ == "__main__":
    main()
