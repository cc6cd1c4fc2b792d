"""What a tf.data pipeline's graph says about it, read before any data: which ops read files,
which make the order (or the values) differ between processes, and whether tf.data can save
its iterator compactly.

The graph is the one tf.data serializes (:func:`jaxload._src.compat.tf_graph`): dataset ops,
with the functions of ``map``/``interleave``/``flat_map`` in its library, each op's seeds as
constant inputs.

Example:
  >>> import tensorflow as tf
  >>> ds = tf.data.Dataset.range(8).shuffle(4)          # no seed: each process draws its own
  >>> [found.split(" (")[0] for found in order_varying(DatasetGraph.of(ds))]
  ['ShuffleDatasetV3 without a seed']
  >>> order_varying(DatasetGraph.of(tf.data.Dataset.range(8).shuffle(4, seed=1)))
  []
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from jaxload._src import compat

# ops that read records from files (TensorFlow's file sharding shards the names they read)
READERS = frozenset({
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "ArrayRecordDataset", "RecordIODataset", "SSTableDataset"})
# ops whose order is drawn at random unless seeded: (seed, seed2) input positions
_SEEDED = {"ShuffleDataset": (2, 3), "ShuffleDatasetV3": (2, 3), "ShuffleAndRepeatDataset": (2, 3),
           "ShuffleAndRepeatDatasetV2": (2, 3), "RandomDataset": (0, 1),
           "RandomDatasetV2": (0, 1)}
_NEVER_SEEDED = frozenset({"ShuffleDatasetV2"})  # seeded by a generator resource only
# ops inside functions whose values are drawn at random unless seeded (attrs seed, seed2)
_RANDOM_VALUES = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "RandomShuffle", "Multinomial", "RandomGamma", "RandomPoissonV2"})
# stateful ops that hold no position: seeds and their generators
_SEED_STATE = frozenset({"DummySeedGenerator", "AnonymousSeedGenerator", "SeedGenerator"})
# ops with state outside the pipeline that may decide what comes next
_EXTERNAL = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless", "VarHandleOp",
                       "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp",
                       "HashTableV2", "MutableHashTableV2", "LookupTableFindV2"})
# ops with state outside the pipeline that a pipeline rebuilt from its graph would not share
_RESOURCES = _EXTERNAL - {"EagerPyFunc", "PyFunc", "PyFuncStateless"}
# ops whose iterators tf.data restores exactly from a symbolic checkpoint (positions, no
# buffers), checked in tests/test_tf_pipeline.py and tests/test_tf_files.py
SYMBOLIC = frozenset({
    "RangeDataset", "TensorSliceDataset", "MapDataset", "ParallelMapDatasetV2",
    "BatchDatasetV2", "PrefetchDataset", "ShardDataset", "SkipDataset", "TakeDataset",
    "RepeatDataset", "FlatMapDataset", "InterleaveDataset", "TFRecordDataset",
    "TFRecordDatasetV2", "TextLineDataset", "FilterDataset", "OptionsDataset"})
# and these in order, once rebuilt as a sequential interleave
# (:func:`jaxload._src.pipelines.tf_rewrite.sequential_interleaves`): ``interleave(...,
# num_parallel_calls=N)``, and the legacy one of ``TFRecordDataset(files, num_parallel_reads=N)``
PARALLEL_INTERLEAVES = frozenset({"ParallelInterleaveDatasetV4",
                                  "LegacyParallelInterleaveDatasetV2"})


@dataclasses.dataclass(frozen=True)
class DatasetGraph:
    """A pipeline's ops, those of its functions included, and its options.

    Attributes:
      nodes: ``(op, node, constants)`` of every op, ``constants`` the Const nodes of its scope
        by name (to read seeds and shard counts).
      deterministic: the pipeline's ``options().deterministic`` (None: unset, which is True).
      external_state: why tf.data cannot save the pipeline's iterator (an op with state outside
        it, e.g. a ``py_function``), or None.
      ignores_external_state: the iterator is saved without the state of ops outside it: the
        user set ``experimental_external_state_policy = IGNORE``, or the only such ops are
        random ones (seeds, augmentations), whose state decides values, never which elements
        come next.
      symbolic_option: the pipeline's ``options().experimental_symbolic_checkpoint`` (None:
        unset); False keeps the buffers in its checkpoints.
    """

    nodes: tuple[tuple[str, Any, dict[str, Any]], ...]
    deterministic: bool | None
    external_state: str | None
    ignores_external_state: bool
    symbolic_option: bool | None = None

    @classmethod
    def of(cls, ds: Any) -> DatasetGraph:
        import tensorflow as tf

        external = None
        try:
            graph = compat.tf_graph(ds, fail_on_external_state=True)
        except tf.errors.FailedPreconditionError as e:
            external = _reason(e)
            graph = compat.tf_graph(ds)
        options = ds.options()
        ignores = (options.experimental_external_state_policy
                   == tf.data.experimental.ExternalStatePolicy.IGNORE)
        nodes = tuple(_nodes(graph))
        named = sorted({op for op, _, _ in nodes} & _EXTERNAL)
        if ignores:
            external = None
        elif named:  # also where TensorFlow's own check passes (it can, in a long-lived process)
            external = external or f"{named[0]} is stateful."
        elif external and external.split(" ")[0] in _RANDOM_VALUES | _SEED_STATE:
            external, ignores = None, True
        return cls(nodes, options.deterministic, external, ignores,
                   options.experimental_symbolic_checkpoint)

    def ops(self) -> set[str]:
        return {op for op, _, _ in self.nodes}

    def readers(self) -> list[str]:
        """The ops that read files, sorted."""
        return sorted(self.ops() & READERS)

    def shard_hint(self) -> bool:
        """Whether the user placed ``shard(SHARD_HINT, SHARD_HINT)``."""
        return any(op == "ShardDataset" and constant(constants, node.input[1]) == -1
                   for op, node, constants in self.nodes)

    def symbolic(self) -> bool:
        """Whether every dataset op restores exactly from a symbolic checkpoint (those in
        ``SYMBOLIC``, and a parallel interleave that keeps its order, rebuilt as
        :func:`~jaxload._src.pipelines.tf_rewrite.sequential_interleaves` builds it), unless
        the pipeline's options set ``experimental_symbolic_checkpoint = False``."""
        ops = {op for op in self.ops() if "Dataset" in op}
        if self.symbolic_option is False:
            return False
        if ops & PARALLEL_INTERLEAVES and (self.ops() & _RESOURCES or any(
                op in PARALLEL_INTERLEAVES and (_unordered(self, node) or not _lengths_known(
                    node, constants)) for op, node, constants in self.nodes)):
            return False  # unordered, or resources a rebuilt graph would not share
        return ops <= SYMBOLIC | PARALLEL_INTERLEAVES


def order_varying(graph: DatasetGraph) -> list[str]:
    """The ops that can give each process another order of the same elements, each with its
    fix."""
    found = []
    for op, node, constants in graph.nodes:
        if op in _NEVER_SEEDED or (op in _SEEDED and not any(
                constant(constants, node.input[i]) for i in _SEEDED[op])):
            found.append(f"{op} without a seed ({_WHAT.get(op, 'a random op')}): give it "
                         "seed=...")
        elif _attr(node, "sloppy") is True:
            found.append(f"{op} with sloppy=True: pass deterministic=True")
        elif _unordered(graph, node):
            found.append(f"{op} with deterministic=False (elements in the order they are "
                         "ready): pass deterministic=True, or leave options.deterministic True")
    return found


def value_varying(graph: DatasetGraph) -> list[str]:
    """The random ops in the pipeline's functions without a seed: each process draws other
    values (other augmentations of the same rows)."""
    return [f"{op} without a seed: give it seed=..., use a tf.random.stateless_* op, or call "
            "tf.random.set_seed before building the pipeline"
            for op, node, _ in graph.nodes
            if op in _RANDOM_VALUES and not (_attr(node, "seed") or _attr(node, "seed2"))]


_WHAT = {"ShuffleDatasetV3": "Dataset.shuffle, or Dataset.list_files with its default "
                             "shuffle=True",
         "ShuffleDataset": "Dataset.shuffle", "ShuffleDatasetV2": "Dataset.shuffle",
         "ShuffleAndRepeatDataset": "shuffle_and_repeat",
         "ShuffleAndRepeatDatasetV2": "shuffle_and_repeat",
         "RandomDataset": "Dataset.random, or sample_from_datasets without a seed",
         "RandomDatasetV2": "Dataset.random, or sample_from_datasets without a seed"}


def _nodes(graph: Any) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    scopes = [list(graph.node)] + [list(f.node_def) for f in graph.library.function]
    for nodes in scopes:
        constants = {n.name: n for n in nodes if n.op == "Const"}
        for node in nodes:
            yield node.op, node, constants


def _unordered(graph: DatasetGraph, node: Any) -> bool:
    """Whether a parallel op hands out its elements in the order they are ready."""
    return _attr(node, "deterministic") == "false" or (
        _attr(node, "deterministic") == "default" and graph.deterministic is False)


def _lengths_known(node: Any, constants: dict[str, Any]) -> bool:
    """Whether a parallel interleave's cycle and block lengths are positive constants (its
    order is then a sequential interleave's with them)."""
    return all(isinstance(value, int) and value > 0 for value in (
        input_constant(node, constants, name) for name in ("cycle_length", "block_length")))


def input_constant(node: Any, constants: dict[str, Any], name: str) -> Any:
    """The value of ``node``'s input argument ``name`` where it is a constant, else None."""
    return constant(constants, node.input[compat.tf_input_index(node, name)])


def constant(constants: dict[str, Any], name: str) -> Any:
    """The value of a constant input (``name`` as a node input: ``Const/_2`` or
    ``Const:output:0``), or None if it is not a constant."""
    import tensorflow as tf

    node = constants.get(name.lstrip("^").split(":")[0])
    if node is None:
        return None
    value = tf.make_ndarray(node.attr["value"].tensor)
    return value.item() if value.size == 1 else value


def _attr(node: Any, name: str) -> Any:
    if name not in node.attr:
        return None
    value = node.attr[name]
    kind = value.WhichOneof("value")
    return value.s.decode() if kind == "s" else getattr(value, kind) if kind else None


def _reason(error: Exception) -> str:
    """The part of a TensorFlow error that names the op (``EagerPyFunc is stateful.``)."""
    message = str(getattr(error, "message", error))
    return message.split(": ", 1)[-1].split(" [Op:")[0].strip() or message
