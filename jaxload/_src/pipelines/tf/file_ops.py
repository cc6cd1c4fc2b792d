"""Which ops keep a tf.data pipeline's meaning when each loading group reads only its own files.

Sharded by files, every op after the file reads runs on one group's records instead of all of
them. An op that works element by element (``map``, ``filter``, parsing), or on whatever records
it is given (``shuffle``, ``repeat``, ``batch``, ``prefetch``), gives the same records in all: each
group's share of them. An op that counts, pairs or positions records (``take``, ``skip``,
``zip``, ``enumerate``, ``shard``, ``window``, ``scan``, ...) would give other records: ``take(5)``
would become ``K x 5``. :data:`KEEP` lists the ops of the first kind; any other op after the file
reads, one jaxload does not know included, blocks file sharding (:func:`blocking`).

Example:
  >>> import tensorflow as tf
  >>> from jaxload._src import compat
  >>> files = tf.data.Dataset.from_tensor_slices(["a.tfrecord", "b.tfrecord"])
  >>> ds = files.interleave(tf.data.TFRecordDataset, cycle_length=2).map(tf.strings.length)
  >>> blocking(compat.tf_graph(ds)) is None
  True
  >>> print(blocking(compat.tf_graph(ds.take(5))).op)
  TakeDataset
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxload._src.pipelines.tf.graph import READERS, called, dataset_inputs, input_constant

# ops after the file reads that give each loading group its share of the records they would
# give over all files: element-wise, or whole-stream ops whose result is a multiset of their
# input (order aside); the readers' own interleave / flat_map over file names included
KEEP = frozenset({
    "MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2", "FilterDataset",
    "ParallelFilterDataset", "PrefetchDataset", "ShuffleDataset", "ShuffleDatasetV2",
    "ShuffleDatasetV3", "ShuffleAndRepeatDataset", "ShuffleAndRepeatDatasetV2", "RepeatDataset",
    "BatchDataset", "BatchDatasetV2", "ParallelBatchDataset", "PaddedBatchDataset",
    "PaddedBatchDatasetV2", "MapAndBatchDataset", "UnbatchDataset",
    "OptionsDataset", "ModelDataset", "MaxIntraOpParallelismDataset", "PrivateThreadPoolDataset",
    "ThreadPoolDataset", "CacheDataset", "CacheDatasetV2", "FlatMapDataset", "InterleaveDataset",
    "ParallelInterleaveDataset", "ParallelInterleaveDatasetV2", "ParallelInterleaveDatasetV3",
    "ParallelInterleaveDatasetV4", "LegacyParallelInterleaveDatasetV2", "AssertNextDataset",
    "ConcatenateDataset", "ParseExampleDataset", "ParseExampleDatasetV2"})

# batches that may drop a partial last batch: kept only without drop_remainder=True
_DROPPING = frozenset({"BatchDatasetV2", "PaddedBatchDatasetV2", "ParallelBatchDataset",
                       "MapAndBatchDataset"})
_DROPS = ("batch(..., drop_remainder=True)", "each loading group would drop the last partial "
          "batch of its own records, where the pipeline drops one")

# the Python call behind an op, and what reading each group's own files would do to it
_CALLS: dict[str, tuple[str, str]] = {
    "TakeDataset": ("take", "each loading group would take its own n records: K times as many"),
    "SkipDataset": ("skip", "each loading group would skip its own n records: K times as many"),
    "ShardDataset": ("shard", "it would split each loading group's share again (1/K² of the "
                     "records); if it splits the data over processes already, pass shard=False"),
    "ZipDataset": ("zip (or enumerate)", "each loading group would pair records of its own "
                   "files (other pairs), or number its own records from 0"),
    "WindowDataset": ("window", "windows would span each group's records, not the pipeline's"),
    "ScanDataset": ("scan", "each loading group would scan its own records"),
    "GroupByWindowDataset": ("group_by_window (or bucket_by_sequence_length)",
                             "groups would form within each group's records"),
    "GroupByReducerDataset": ("group_by_reducer", "each group would reduce its own records"),
    "SnapshotDatasetV2": ("snapshot", "every loading group would write and read one snapshot"),
    "AssertCardinalityDataset": ("assert_cardinality", "each group holds fewer records"),
    "TakeWhileDataset": ("take_while", "each loading group would stop at its own record"),
    "UniqueDataset": ("unique", "a record in two groups' files would stay twice"),
    "RebatchDataset": ("rebatch", "batches would be cut from each group's records"),
    "RebatchDatasetV2": ("rebatch", "batches would be cut from each group's records"),
    "SlidingWindowDataset": ("sliding_window", "windows would span each group's records"),
    "IgnoreErrorsDataset": ("ignore_errors", "TensorFlow's file sharding cannot see through it"),
    "ConcatenateDataset": ("concatenate", "the input that reads no files would be read whole by "
                           "every group"),
    "DirectedInterleaveDataset": ("sample_from_datasets (or choose_from_datasets)",
                                  "TensorFlow's file sharding cannot split it (its choices come "
                                  "from a dataset that reads no files)"),
}


@dataclasses.dataclass(frozen=True)
class Blocking:
    """An op after the file reads that file sharding would change.

    Attributes:
      op: the op's name in the graph (``TakeDataset``).
      call: the Python call behind it (``take``).
      after: how many ops after the file reads it comes (1: right after them).
      change: what reading each group's own files would change.
    """

    op: str
    call: str
    after: int
    change: str

    @property
    def fix(self) -> str:
        """How to keep file sharding."""
        if self.after == 0:
            return "choose the files in Python and list them with from_tensor_slices"
        if self.call == _DROPS[0]:
            return ("batch with drop_remainder=False (remainder='pad' then keeps each group's "
                    "last rows, padded), or leave the batching to jaxload")
        return "apply it before the files are read (to the list of file names)"

    def __str__(self) -> str:
        place = "right after the files are read" if self.after == 1 else (
            f"{self.after} ops after the files are read" if self.after > 1 else
            "on the file names, before they are read")
        return f"{self.call} ({self.op}, {place}): {self.change}"


def blocking(graph: Any) -> Blocking | None:
    """The first op (nearest the file reads) whose meaning file sharding would change, in a
    ``GraphDef`` of :func:`jaxload._src.compat.tf_graph`; None if every op after the file reads
    is in :data:`KEEP` (or the pipeline reads no files)."""
    nodes = {node.name: node for node in graph.node}
    constants = {name: node for name, node in nodes.items() if node.op == "Const"}
    reading = reading_files(graph, nodes)
    found: list[tuple[int, Blocking]] = []
    for name, depth in reading.items():
        if depth == 0:  # a reader, or the interleave / flat_map that reads the named files
            continue
        node = nodes[name]
        why = _why_blocked(node, dataset_inputs(node, nodes), reading, constants)
        if why is not None:
            call, change = why
            found.append((depth, Blocking(node.op, call, depth, change)))
    for name in _names_ops(nodes, reading):  # over a shuffle that TensorFlow moves below them
        call = _CALLS[nodes[name].op][0]
        found.append((0, Blocking(nodes[name].op, call, 0, _ON_NAMES.format(call=call))))
    return min(found, key=lambda found: found[0])[1] if found else None


_ON_NAMES = ("TensorFlow's file sharding moves a shuffle of the file names after the split it "
             "inserts, so the {call} would apply to the names in their listed order instead of "
             "the shuffled one (another subset of the files, or other pairs)")
# ops whose result depends on the names' order: counted, or numbered and paired by position
_COUNTS = frozenset({"TakeDataset", "SkipDataset", "ShardDataset", "TakeWhileDataset",
                     "ZipDataset"})
_SHUFFLES = frozenset({"ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3",
                       "ShuffleAndRepeatDataset", "ShuffleAndRepeatDatasetV2"})


def _names_ops(nodes: dict[str, Any], reading: dict[str, int]) -> list[str]:
    """The ops that count the file names (``take``, ``skip``, ``shard``) or number or pair them
    by position (``enumerate``, ``zip``) over a shuffle of them, between where they are listed
    and the interleave (or flat_map) that reads them: TensorFlow's file sharding moves the
    shuffle below them (``list_files(shuffle=True).take(n)``)."""
    found = []
    for name, depth in reading.items():
        if depth != 0 or nodes[name].op in READERS:  # not a read of the files its input names
            continue
        counting: list[str] = []  # count ops above the node visited, nearest the reads first
        chain = dataset_inputs(nodes[name], nodes)[:1]
        while chain and chain[0] not in reading:
            node = nodes[chain[0]]
            if node.op in _COUNTS:
                counting.append(chain[0])
            elif node.op in _SHUFFLES and counting:
                found.append(counting[0])
                break
            inputs = dataset_inputs(node, nodes)  # a zip: on, through its shuffled input
            chain = [next((i for i in inputs if _shuffled(i, nodes)), inputs[0])] if (
                node.op == "ZipDataset" and inputs) else inputs[:1]
    return found


def _shuffled(name: str, nodes: dict[str, Any]) -> bool:
    """Whether a shuffle is under node ``name`` (the node itself included)."""
    todo, seen = [name], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if nodes[current].op in _SHUFFLES:
            return True
        todo.extend(dataset_inputs(nodes[current], nodes))
    return False


def _why_blocked(node: Any, inputs: list[str], reading: dict[str, int],
                 constants: dict[str, Any]) -> tuple[str, str] | None:
    if node.op == "ConcatenateDataset" and not all(i in reading for i in inputs):
        return _CALLS[node.op]  # TensorFlow could not shard the input that reads no files
    if node.op in _DROPPING and input_constant(node, constants, "drop_remainder") is not False:
        return _DROPS  # each group would drop a partial batch of its own
    if node.op in KEEP:  # a cache to a file gets a file of its own (tf_files.own_caches)
        return None
    op: str = node.op
    return _CALLS.get(op, (op, "it would apply to each loading group's own records "
                                "instead of all of them; jaxload keeps file sharding only for "
                                "ops it knows to keep their meaning"))


def reading_files(graph: Any, nodes: dict[str, Any]) -> dict[str, int]:
    """Top-level nodes that read files or come after a file read, each with its distance (in
    ops) from the nearest file read: 0 for a reader, or an op whose functions read files."""
    functions = {f.signature.name: f for f in graph.library.function}
    reads_in_function = {name for name in functions if _function_reads(name, functions, set())}
    depth: dict[str, int] = {}

    def visit(name: str) -> int | None:
        if name in depth:
            return depth[name]
        node = nodes[name]
        inner = node.op in READERS or any(f in reads_in_function for f in called(node))
        below = [d for d in (visit(i) for i in dataset_inputs(node, nodes)) if d is not None]
        found = 0 if inner and not below else (min(below) + 1 if below else None)
        if found is not None:
            depth[name] = found
        return found

    for name, node in nodes.items():
        if "Dataset" in node.op:
            visit(name)
    return depth


def _function_reads(name: str, functions: dict[str, Any], seen: set[str]) -> bool:
    if name in seen or name not in functions:
        return False
    seen.add(name)
    return any(node.op in READERS or any(_function_reads(f, functions, seen)
                                         for f in called(node))
               for node in functions[name].node_def)


def separate_caches(graph: Any, suffix: str) -> list[tuple[str, str]]:
    """Renames the file of every ``cache(filename)`` in ``graph`` (a ``GraphDef``, changed in
    place) to ``filename + suffix``; returns ``(old, new)`` for each. Sharded, each loading group
    (and each process: they may share a disk) caches what it reads in a file of its own, where
    one file would be written by one process and read by all, with its records."""
    import tensorflow as tf

    renamed = []
    for nodes in [graph.node] + [f.node_def for f in graph.library.function]:
        constants = {n.name: n for n in nodes if n.op == "Const"}
        for node in nodes:
            if node.op not in ("CacheDataset", "CacheDatasetV2"):
                continue
            name = constants.get(node.input[1].split(":")[0])
            if name is None:  # a file name computed in the pipeline: not renamed
                continue
            old = tf.make_ndarray(name.attr["value"].tensor).item().decode()
            if old:  # "" caches in memory
                new = old + suffix
                name.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(new, tf.string))
                renamed.append((old, new))
    return renamed
