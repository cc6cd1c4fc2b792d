"""Which ops of a tf.data pipeline can give each process another order of the same elements (or
other values), read from its graph before any data (:class:`~jaxload._src.pipelines.tf.graph.
DatasetGraph`): an unseeded shuffle, a shuffle seeded only by ``tf.random.set_seed``, an
unordered interleave, ``Dataset.load``'s reader over the machine's CPU count. What the graph
cannot show (a generator, a ``py_function``) is compared at run time instead
(:mod:`~jaxload._src.pipelines.tf.probe`).

Example:
  >>> import tensorflow as tf
  >>> ds = tf.data.Dataset.range(8).shuffle(4)          # no seed: each process draws its own
  >>> [found.split(" (")[0] for found in order_varying(DatasetGraph.of(ds))]
  ['ShuffleDatasetV3 without a seed']
  >>> order_varying(DatasetGraph.of(tf.data.Dataset.range(8).shuffle(4, seed=1)))
  []
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
from typing import Any

from jaxload._src import compat
from jaxload._src.pipelines.tf.decide import ELEMENTS, group_refusal, order_refusal
from jaxload._src.pipelines.tf.file_ops import KEEP
from jaxload._src.pipelines.tf.graph import (
    INTERLEAVES,
    RANDOM_VALUES,
    DatasetGraph,
    attr,
    constant,
    functions_of,
    input_constant,
    unordered,
)
from jaxload._src.pipelines.tf.split import Sharding
from jaxload._src.plan import Plan

# ops whose order is drawn at random unless seeded: (seed, seed2) input positions
_SEEDED = {"ShuffleDataset": (2, 3), "ShuffleDatasetV3": (2, 3), "ShuffleAndRepeatDataset": (2, 3),
           "ShuffleAndRepeatDatasetV2": (2, 3), "RandomDataset": (0, 1),
           "RandomDatasetV2": (0, 1)}
_NEVER_SEEDED = frozenset({"ShuffleDatasetV2"})  # seeded by a generator resource only
_MAXINT32 = 2**31 - 1  # TensorFlow's bound for the op seeds it draws
# (An interleave's order is set by its cycle_length; unset or AUTOTUNE, TensorFlow puts the
# machine's CPU count in the graph: the same order on machines alike, which the first round's
# check compares at run time.)
# readers whose default reader_func interleaves os.cpu_count() files
_CPU_COUNT_READERS = {"LoadDataset": "Dataset.load", "SnapshotDatasetV2": "Dataset.snapshot"}

def order_varying(graph: DatasetGraph) -> list[str]:
    """The ops that can give each process another order of the same elements, each with its
    fix."""
    found = []
    drawn = _drawn_seeds()
    for op, node, constants in graph.nodes:
        seeds = [constant(constants, node.input[i]) for i in _SEEDED.get(op, ())]
        if op in _NEVER_SEEDED or (op in _SEEDED and not any(seeds)):
            found.append(f"{op} without a seed ({_WHAT.get(op, 'a random op')}): give it "
                         "seed=...")
        elif op in _SEEDED and _from_global_seed(seeds, drawn):
            found.append(f"{op} seeded only by tf.random.set_seed ({_WHAT.get(op, 'a random op')}"
                         "): its seed comes from a counter of each process's random ops, so one "
                         "more random op on one process changes its order; give it seed=...")
        elif attr(node, "sloppy") is True:
            found.append(f"{op} with sloppy=True: pass deterministic=True")
        elif unordered(graph, node):
            found.append(f"{op} with deterministic=False (elements in the order they are "
                         "ready): pass deterministic=True, or leave options.deterministic True")
        elif op in _CPU_COUNT_READERS and _cpu_count_cycle(graph, node):
            found.append(f"{op} ({_CPU_COUNT_READERS[op]}) with its default reader_func, which "
                         "interleaves as many files as the machine has CPUs: pass reader_func="
                         "lambda datasets: datasets.interleave(lambda d: d, cycle_length=1)")
    return found


def check_same_order(graph: DatasetGraph, sharding: Sharding, plan: Plan) -> None:
    """Refuses, before any data, a pipeline whose order (or values) can differ between
    processes where that would duplicate and lose records, or give the processes of one loading
    group different rows. What must give the same order is what feeds the split: the whole
    pipeline sharded by elements; the file names (less the shuffles TensorFlow moves after the
    split) sharded by files; what comes before a ``SHARD_HINT``; and within a loading group of
    several processes, everything."""
    group = plan.loading_groups[plan.shard_index]
    before = graph if sharding.mode == ELEMENTS else sharding.before
    order = order_varying(before) if before is not None and plan.shard_count > 1 else []
    if order:
        raise ValueError(order_refusal(sharding.mode, plan.shard_count, order))
    varying = order_varying(graph) + value_varying(graph)
    if varying and len(group) > 1:
        raise ValueError(group_refusal(list(group), varying))


def value_varying(graph: DatasetGraph) -> list[str]:
    """The random ops in the pipeline's functions without a seed: each process draws other
    values (other augmentations of the same rows)."""
    drawn = _drawn_seeds()
    return [f"{op} {'without a seed' if not seeds[0] else 'seeded only by tf.random.set_seed'}: "
            "give it seed=..., or use a tf.random.stateless_* op"
            for op, node, _ in graph.nodes if op in RANDOM_VALUES
            for seeds in [[attr(node, "seed"), attr(node, "seed2")]]
            if not any(seeds) or _from_global_seed(seeds, drawn)]


def _cpu_count_cycle(graph: DatasetGraph, node: Any) -> bool:
    """Whether the functions of ``node`` (a reader's reader_func) interleave this machine's CPU
    count of inputs at a time."""
    if graph.graph is None:
        return False
    for function in functions_of(graph.graph, [node]):
        constants = {n.name: n for n in function.node_def if n.op == "Const"}
        if any(inner.op in INTERLEAVES and input_constant(inner, constants, "cycle_length")
               == multiprocessing.cpu_count() for inner in function.node_def):
            return True
    return False


def _drawn_seeds(draws: int = 10_000) -> tuple[int | None, frozenset[int]]:
    """The global seed (``tf.random.set_seed``), and the op seeds TensorFlow gives the first
    ``draws`` random ops built eagerly without a seed of their own (it draws them from a
    ``random.Random`` of the global seed, per process: one more random op on one process, and
    every later one gets another seed there)."""
    seed = compat.tf_global_seed()
    if seed is None:
        return None, frozenset()
    rng = random.Random(seed)
    return seed % _MAXINT32, frozenset(rng.randint(0, _MAXINT32) % _MAXINT32
                                       for _ in range(draws))


def _from_global_seed(seeds: list[Any], drawn: tuple[int | None, frozenset[int]]) -> bool:
    """Whether an op's ``(seed, seed2)`` are the global seed and a drawn op seed."""
    global_seed, ops = drawn
    return (global_seed is not None and len(seeds) == 2 and seeds[0] == global_seed
            and seeds[1] in ops)


_WHAT = {"ShuffleDatasetV3": "Dataset.shuffle, or Dataset.list_files with its default "
                             "shuffle=True",
         "ShuffleDataset": "Dataset.shuffle", "ShuffleDatasetV2": "Dataset.shuffle",
         "ShuffleAndRepeatDataset": "shuffle_and_repeat",
         "ShuffleAndRepeatDatasetV2": "shuffle_and_repeat",
         "RandomDataset": "Dataset.random, or sample_from_datasets without a seed",
         "RandomDatasetV2": "Dataset.random, or sample_from_datasets without a seed"}




# dataset ops whose order the graph fixes (given their inputs, seeds and constants): where a
# pipeline has only these, the run-time check of its order (probe.py) has nothing to add
ORDERED = (KEEP - {"CacheDataset", "CacheDatasetV2"}) | frozenset({  # a cache may hold a past run
    "RangeDataset", "TensorDataset", "TensorSliceDataset", "SparseTensorSliceDataset",
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "TakeDataset", "SkipDataset", "ShardDataset", "ZipDataset",
    "WindowDataset", "ScanDataset", "DirectedInterleaveDataset", "RandomDataset",
    "RandomDatasetV2", "GroupByWindowDataset", "TakeWhileDataset", "AssertCardinalityDataset",
    "IgnoreErrorsDataset"})


def unseen_order(graph: DatasetGraph) -> list[str]:
    """The ops whose order the graph cannot show: a source or op outside :data:`ORDERED` (a
    generator, a cache that may hold an earlier run's records, ...), and an interleave whose
    ``cycle_length`` is this machine's CPU count (what TensorFlow writes for an unset one, so
    another machine may interleave another number of inputs)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    found = sorted({op for op, _, _ in graph.nodes if "Dataset" in op and op not in ORDERED})
    found += sorted({f"{op} with cycle_length={cpus}" for op, node, constants in graph.nodes
                     if op in INTERLEAVES and input_constant(node, constants, "cycle_length")
                     == cpus})
    return found


def structure(graph: DatasetGraph) -> str:
    """The pipeline's dataset ops and interleave cycle lengths, in words with a hash: the same
    on every process that builds the same pipeline (function names, which count each process's
    traces, left out). A cycle length TensorFlow set from the machine's CPU count differs
    between machines of other CPU counts."""
    ops = sorted(op for op, _, _ in graph.nodes if "Dataset" in op)
    cycles = sorted(input_constant(node, constants, "cycle_length")
                    for op, node, constants in graph.nodes if op in INTERLEAVES)
    digest = hashlib.blake2b(repr((ops, cycles)).encode(), digest_size=8).hexdigest()
    return f"{len(ops)} dataset ops, hashed {digest}" + (
        f"; interleave cycle lengths {cycles}" if cycles else "")


def constants(graph: DatasetGraph) -> str:
    """A hash of the values of the pipeline's top-level constants (seeds, buffer sizes, counts,
    values a function captured) in graph order, less the rows of its in-memory sources (the probe
    hashes those from the arrays): with :func:`structure`, what tells another pipeline apart when
    a state is restored into it (a shuffle with another seed)."""
    nodes = list(graph.graph.node) if graph.graph is not None else []
    rows = {i.split(":")[0] for node in nodes if node.op in _SOURCES for i in node.input}
    digest = hashlib.blake2b(digest_size=8)
    for node in nodes:  # a resource's or variant's handle differs in every build
        if node.op == "Const" and node.name not in rows and node.attr["dtype"].type not in (
                _RESOURCE, _VARIANT):
            digest.update(node.attr["value"].tensor.SerializeToString(deterministic=True))
    return digest.hexdigest()


_SOURCES = frozenset({"TensorSliceDataset", "TensorDataset", "SparseTensorSliceDataset"})
_RESOURCE, _VARIANT = 20, 21  # tensorflow's DataType enum: DT_RESOURCE, DT_VARIANT
