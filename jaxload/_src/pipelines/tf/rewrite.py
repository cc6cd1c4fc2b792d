"""A pipeline rebuilt from its graph so that tf.data checkpoints it by positions alone
(``experimental_symbolic_checkpoint``) at the cost of a plain pass: each parallel interleave
that keeps its order becomes a sequential ``interleave`` whose open inputs each read ahead on
their own thread. The same elements come in the same order.

Why: in TensorFlow 2.21 a parallel interleave under a symbolic checkpoint costs time per element
and checkpoint bytes that grow with every input it has consumed (measured over 1024 inputs of
128 elements: 85 us per element in the first quarter of the pass, 400 us in the last, against
4 us without; the checkpoint 62 KB after a quarter, 228 KB at the end), and its restore never
yields again when the checkpoint holds inputs opened ahead of the cycle. A sequential
interleave under a symbolic checkpoint costs a few us per element and a constant few KB.

Example:
  >>> import tensorflow as tf
  >>> from jaxload._src.pipelines.tf.graph import DatasetGraph
  >>> ds = tf.data.Dataset.range(3).interleave(
  ...     lambda i: tf.data.Dataset.range(10 * i, 10 * i + 2), cycle_length=2,
  ...     num_parallel_calls=tf.data.AUTOTUNE)
  >>> rebuilt = sequential_interleaves(ds)
  >>> [int(x) for x in rebuilt] == [int(x) for x in ds]
  True
  >>> sorted(op for op in DatasetGraph.of(rebuilt).ops() if "Interleave" in op)
  ['InterleaveDataset']
"""

from __future__ import annotations

from typing import Any

from jaxload._src import compat
from jaxload._src.pipelines.tf.graph import PARALLEL_INTERLEAVES, input_constant

_INTERLEAVE = "InterleaveDataset"
_READ_AHEAD = "jaxload_read_ahead"


def sequential_interleaves(ds: Any, graph: Any = None) -> Any:
    """``ds`` with each parallel interleave rebuilt as ``interleave(lambda x: f(x).prefetch(n),
    cycle_length, block_length)``, ``n`` its ``buffer_output_elements`` (by default ``2 *
    block_length + 1``), and as it is without one. Only for parallel interleaves that keep
    their order (``DatasetGraph.symbolic`` tells): an unordered one has another order.

    The ``cycle_length`` inputs are read in parallel as before, one thread each; what is lost
    is the opening of the next inputs (files) ahead of their turn, which TensorFlow's restore of
    a symbolic checkpoint cannot take (see the module). ``graph``: ``ds``'s, where read
    already (not changed: the pipeline is not serialized again).
    """
    changed = sequential_graph(compat.tf_graph(ds) if graph is None else graph)
    return ds if changed is None else compat.tf_from_graph(changed, ds.element_spec)


def sequential_graph(graph: Any) -> Any:
    """A copy of ``graph`` (a ``GraphDef``) with its parallel interleaves rebuilt as
    :func:`sequential_interleaves` does, or None where it has none."""
    graph = type(graph).FromString(graph.SerializeToString())
    functions = {f.signature.name: f for f in graph.library.function}
    scopes = [graph.node] + [f.node_def for f in functions.values()]
    read_ahead: set[str] = set()
    for nodes in scopes:
        constants = {n.name: n for n in nodes if n.op == "Const"}
        for node in [n for n in nodes if n.op in PARALLEL_INTERLEAVES]:
            size = _read_ahead_size(node, constants)
            _as_interleave(node)
            name = node.attr["f"].func.name
            if name not in read_ahead:
                read_ahead.add(name)
                _prefetch_result(functions[name], node, size)
    return graph if read_ahead else None


def _read_ahead_size(node: Any, constants: dict[str, Any]) -> int:
    size = input_constant(node, constants, "buffer_output_elements")
    if isinstance(size, int) and size > 0:
        return size
    return 2 * int(input_constant(node, constants, "block_length")) + 1


def _as_interleave(node: Any) -> None:
    """The ``NodeDef`` of a parallel interleave made a sequential one: its inputs after
    ``block_length`` and the attributes a sequential interleave lacks dropped."""
    kept = compat.tf_input_index(node, "block_length") + 1
    controls = [i for i in node.input if i.startswith("^")]
    data = [i for i in node.input if not i.startswith("^")][:kept]
    del node.input[:]
    node.input.extend(data + controls)
    node.op = _INTERLEAVE
    allowed = compat.tf_op_attrs(_INTERLEAVE)
    for name in [a for a in node.attr if a not in allowed]:
        del node.attr[name]


def _prefetch_result(function: Any, node: Any, size: int) -> None:
    """Ends ``function`` (an interleave's, returning a dataset) with ``prefetch(size)``."""
    import tensorflow as tf

    (output,) = function.signature.output_arg
    buffer = function.node_def.add(name=f"{_READ_AHEAD}_size", op="Const")
    buffer.attr["dtype"].type = tf.int64.as_datatype_enum
    buffer.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(size, tf.int64))
    prefetch = function.node_def.add(name=_READ_AHEAD, op="PrefetchDataset")
    prefetch.input.extend([function.ret[output.name], f"{buffer.name}:output:0"])
    for name in ("output_types", "output_shapes"):
        prefetch.attr[name].CopyFrom(node.attr[name])
    function.ret[output.name] = f"{prefetch.name}:handle:0"
