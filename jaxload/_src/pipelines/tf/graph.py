"""What a tf.data pipeline's graph says about it, read before any data: which ops read files,
where they sit, and whether tf.data can save its iterator compactly. Which ops make the order
(or the values) differ between processes: :mod:`~jaxload._src.pipelines.tf.order`.

The graph is the one tf.data serializes (:func:`jaxload._src.compat.tf_graph`): dataset ops,
with the functions of ``map``/``interleave``/``flat_map`` in its library, each op's seeds as
constant inputs.

Example:
  >>> import tensorflow as tf
  >>> graph = DatasetGraph.of(tf.data.TFRecordDataset(["a.tfrecord"]).map(tf.strings.length))
  >>> graph.readers(), graph.symbolic()
  (['TFRecordDataset'], True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from jaxload._src import compat

# ops that read records from files (TensorFlow's file sharding shards the names they read)
READERS = frozenset({
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "ArrayRecordDataset", "RecordIODataset", "SSTableDataset"})
# ops that read files which TensorFlow's file sharding cannot split between workers: a pipeline
# reading through them is sharded by elements, with a warning naming them
UNSPLITTABLE = frozenset({
    "LoadDataset", "SnapshotDatasetV2", "SnapshotDataset", "SnapshotDatasetReader",
    "CSVDataset", "CSVDatasetV2", "ExperimentalCSVDataset", "SqlDataset",
    "ExperimentalSqlDataset", "ExperimentalLMDBDataset", "LMDBDataset"})
# interleaves, whose order is set by their cycle_length
INTERLEAVES = frozenset({"InterleaveDataset", "ParallelInterleaveDatasetV2",
                         "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4",
                         "LegacyParallelInterleaveDatasetV2"})
# ops inside functions whose values are drawn at random unless seeded (attrs seed, seed2)
RANDOM_VALUES = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "RandomShuffle", "Multinomial", "RandomGamma", "RandomPoissonV2"})
_ONE_TO_ONE = frozenset({"MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2"})  # values only
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
# (:func:`jaxload._src.pipelines.tf.rewrite.sequential_interleaves`): ``interleave(...,
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
        random ones (seeds; augmentations in a map's function), whose state decides values,
        never which elements come next.
      symbolic_option: the pipeline's ``options().experimental_symbolic_checkpoint`` (None:
        unset); False keeps the buffers in its checkpoints.
      stateful: an op with state outside the pipeline (``RandomUniform is stateful.``), even
        one whose state a save ignores, or None. Under a symbolic checkpoint TensorFlow logs
        that line as a warning at every ``next()`` of the iterator (and of each ``with_options``
        inside the pipeline: every element), whatever the external-state policy.
    """

    nodes: tuple[tuple[str, Any, dict[str, Any]], ...]
    deterministic: bool | None
    external_state: str | None
    ignores_external_state: bool
    symbolic_option: bool | None = None
    graph: Any = dataclasses.field(default=None, compare=False, repr=False)
    stateful: str | None = None

    @classmethod
    def of(cls, ds: Any, options: Any = None) -> DatasetGraph:
        """The graph of ``ds``; ``options``: the pipeline's options where ``ds`` is a copy of
        it rebuilt from its dataset objects (which do not carry them), else ``ds.options()``."""
        import tensorflow as tf

        graph, refused = compat.tf_graph_checked(ds)
        external = None if refused is None else _reason(refused)
        options = ds.options() if options is None else options
        ignores = (options.experimental_external_state_policy
                   == tf.data.experimental.ExternalStatePolicy.IGNORE)
        nodes = tuple(_nodes(graph))
        ops = {op for op, _, _ in nodes}
        named = sorted(ops & _EXTERNAL)
        stateful = external or next((f"{op} is stateful." for op in sorted(
            ops & (_EXTERNAL | RANDOM_VALUES))), None)
        if ignores:
            external = None
        elif named:  # also where TensorFlow's own check passes (it can, in a long-lived process)
            external = external or f"{named[0]} is stateful."
        elif choosing := _random_choosing(graph):  # re-read: a new iterator draws them again
            external = f"{choosing} decides which elements come next"
        elif external and external.split(" ")[0] in RANDOM_VALUES | _SEED_STATE or (
                not external and stateful):  # random ops, where TensorFlow's check passed
            external, ignores = None, True
        return cls(nodes, options.deterministic, external, ignores,
                   options.experimental_symbolic_checkpoint, graph, stateful)

    def feeding(self, names: list[str], graph: Any = None) -> DatasetGraph:
        """The part of the pipeline that feeds the top-level nodes ``names`` (themselves
        excluded) of ``graph`` (a ``GraphDef``; by default the pipeline's own), functions
        included: what decides the order of the elements reaching them."""
        graph = self.graph if graph is None else graph
        top = upstream(graph, names)
        return dataclasses.replace(self, nodes=tuple(_nodes_of(graph, top)), graph=graph)

    def ops(self) -> set[str]:
        return {op for op, _, _ in self.nodes}

    def caches_to_files(self) -> bool:
        """Whether the pipeline has a ``cache(filename)`` (or a cache whose file is computed)."""
        return any(op in ("CacheDataset", "CacheDatasetV2") and constant(
            constants, node.input[1]) != b"" for op, node, constants in self.nodes)

    def readers(self) -> list[str]:
        """The ops that read files, sorted."""
        return sorted(self.ops() & READERS)

    def shard_hints(self) -> list[str]:
        """The names of the ``shard(SHARD_HINT, SHARD_HINT)`` nodes the user placed in the
        pipeline itself (TensorFlow fills in only those, not those inside functions)."""
        if self.graph is None:
            return []
        constants = {n.name: n for n in self.graph.node if n.op == "Const"}
        return [node.name for node in self.graph.node if node.op == "ShardDataset"
                and constant(constants, node.input[1]) == -1]

    def symbolic(self) -> bool:
        """Whether every dataset op restores exactly from a symbolic checkpoint (those in
        ``SYMBOLIC``, and a parallel interleave that keeps its order, rebuilt as
        :func:`~jaxload._src.pipelines.tf.rewrite.sequential_interleaves` builds it), unless
        the pipeline's options set ``experimental_symbolic_checkpoint = False``, or it has a
        stateful op (a random augmentation, a ``py_function``) and its options do not set
        ``experimental_symbolic_checkpoint = True``: TensorFlow would log a warning at every
        batch (``stateful``)."""
        ops = {op for op in self.ops() if "Dataset" in op}
        if self.symbolic_option is False or (self.stateful and self.symbolic_option is not True):
            return False
        if ops & PARALLEL_INTERLEAVES and (self.ops() & _RESOURCES or any(
                op in PARALLEL_INTERLEAVES and (unordered(self, node) or not _lengths_known(
                    node, constants)) for op, node, constants in self.nodes)):
            return False  # unordered, or resources a rebuilt graph would not share
        return ops <= SYMBOLIC | PARALLEL_INTERLEAVES


def _nodes(graph: Any) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    scopes = [list(graph.node)] + [list(f.node_def) for f in graph.library.function]
    for nodes in scopes:
        constants = {n.name: n for n in nodes if n.op == "Const"}
        for node in nodes:
            yield node.op, node, constants


def _random_choosing(graph: Any) -> str | None:
    """A random op whose values decide which elements come next, where a save cannot hold its
    state: one in the function of a dataset op other than a map (a ``filter``'s predicate)."""
    library = {f.signature.name: f for f in graph.library.function}
    for owner in [*graph.node, *(n for f in graph.library.function for n in f.node_def)]:
        todo, seen = [] if "Dataset" not in owner.op or owner.op in _ONE_TO_ONE else list(
            called(owner)), set()
        while todo:
            name = todo.pop()
            if name not in seen and name in library:
                seen.add(name)
                for node in library[name].node_def:
                    if node.op in RANDOM_VALUES:
                        return f"{node.op} in the function of a {owner.op}"
                    if "Dataset" not in node.op:  # a dataset's own functions: its own owner
                        todo.extend(called(node))
    return None


def _nodes_of(graph: Any, top: list[Any]) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """As :func:`_nodes`, for the top-level nodes ``top`` and the functions they call."""
    constants = {n.name: n for n in graph.node if n.op == "Const"}
    for node in top:
        yield node.op, node, constants
    for function in functions_of(graph, top):
        inner = {n.name: n for n in function.node_def if n.op == "Const"}
        for node in function.node_def:
            yield node.op, node, inner


def upstream(graph: Any, names: Iterable[str]) -> list[Any]:
    """The top-level dataset nodes of ``graph`` that feed the nodes ``names`` (themselves
    excluded)."""
    nodes = {node.name: node for node in graph.node}
    seen: set[str] = set()
    todo = [i for name in names for i in dataset_inputs(nodes[name], nodes)]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(dataset_inputs(nodes[name], nodes))
    return [nodes[name] for name in sorted(seen)]


def functions_of(graph: Any, top: Iterable[Any]) -> list[Any]:
    """The library functions that the nodes ``top`` call, directly or through others."""
    library = {f.signature.name: f for f in graph.library.function}
    seen: set[str] = set()
    todo = [name for node in top for name in called(node)]
    while todo:
        name = todo.pop()
        if name in seen or name not in library:
            continue
        seen.add(name)
        todo.extend(n for node in library[name].node_def for n in called(node))
    return [library[name] for name in sorted(seen)]


def called(node: Any) -> Iterator[str]:
    """The functions a node calls (``map``'s, ``interleave``'s, ``filter``'s predicate, ...,
    and each branch of a ``Case``, a list of functions)."""
    for attr in node.attr.values():
        kind = attr.WhichOneof("value")
        if kind == "func" and attr.func.name:
            yield attr.func.name
        elif kind == "list":
            yield from (func.name for func in attr.list.func if func.name)


def dataset_inputs(node: Any, nodes: dict[str, Any]) -> list[str]:
    """The names of a node's inputs that are datasets."""
    names = [i.split(":")[0] for i in node.input if not i.startswith("^")]
    return [n for n in names if n in nodes and "Dataset" in nodes[n].op]


def unordered(graph: DatasetGraph, node: Any) -> bool:
    """Whether a parallel op hands out its elements in the order they are ready."""
    return attr(node, "deterministic") == "false" or (
        attr(node, "deterministic") == "default" and graph.deterministic is False)


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


def attr(node: Any, name: str) -> Any:
    if name not in node.attr:
        return None
    value = node.attr[name]
    kind = value.WhichOneof("value")
    return value.s.decode() if kind == "s" else getattr(value, kind) if kind else None


def _reason(message: str) -> str:
    """The part of a TensorFlow error's message that names the op (``EagerPyFunc is
    stateful.``)."""
    return message.split(": ", 1)[-1].split(" [Op:")[0].strip() or message
