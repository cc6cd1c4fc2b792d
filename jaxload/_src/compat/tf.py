"""TensorFlow's internals that jaxload reads (see :mod:`jaxload._src.compat`): a tf.data pipeline's
graph and its rebuild, the file-sharding rewrite, the dataset objects' inputs, iterator
checkpoints as bytes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from jaxload._src.compat.tf_logs import ERROR, logs_at_least, no_info_logs

_RESOURCE = 20  # DT_RESOURCE
_GRAPPLER = threading.Lock()  # one rewrite at a time, as Grappler's own entry point does


def tf_graph(ds: Any, *, fail_on_external_state: bool = False) -> Any:
    """A ``tf.data.Dataset``'s graph as a ``GraphDef`` (its functions in ``library``):
    ``ds._as_serialized_graph``, without device placements. With ``fail_on_external_state``
    it raises TensorFlow's ``FailedPreconditionError`` naming an op whose state tf.data cannot
    save (a ``py_function``, ...)."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    policy = tf.data.experimental.ExternalStatePolicy
    graph = graph_pb2.GraphDef()
    # a refusal is raised here, named by the caller: TensorFlow's own WARNING line of it
    # ("Local rendezvous is aborting ...") would only repeat it, so it is off while inside
    with logs_at_least(ERROR) if fail_on_external_state else contextlib.nullcontext():
        serialized = ds._as_serialized_graph(
            external_state_policy=policy.FAIL if fail_on_external_state else policy.IGNORE,
            strip_device_assignment=True)
    graph.ParseFromString(serialized.numpy())
    for nodes in [graph.node] + [f.node_def for f in graph.library.function]:
        for node in nodes:  # what stripping leaves (a py_function's "/device::0") fails later
            node.device = ""
    return graph


def tf_graph_checked(ds: Any) -> tuple[Any, str | None]:
    """:func:`tf_graph` of ``ds``, and where tf.data refuses to save its state (a
    ``py_function``, a generator...) the message of its ``FailedPreconditionError``, which
    names the op (the graph then read ignoring it), else None. (The message, not the error:
    its traceback would hold the pipeline.)"""
    import tensorflow as tf

    try:
        return tf_graph(ds, fail_on_external_state=True), None
    except tf.errors.FailedPreconditionError as e:
        refused = str(getattr(e, "message", e))
    return tf_graph(ds), refused


def tf_shard_graph(graph: Any, num_workers: int, index: int, policy: Any) -> Any:
    """TensorFlow's sharding rewrite (tf.distribute's ``AutoShardPolicy``) for worker ``index``
    of ``num_workers``, applied to a pipeline's graph read already (a ``GraphDef`` as
    :func:`tf_graph` returns; not changed): a new ``GraphDef``, nothing serialized again. FILE
    inserts a shard of the file names before the first op that reads them; HINT fills in
    ``SHARD_HINT``. It is the ``tf_auto_shard`` optimizer that ``_AutoShardDataset`` runs on a
    dataset's graph, run here through Grappler (``tf_optimizer.OptimizeGraph``, the graph's
    sink fetched as ``train_op``) over a virtual cluster of one CPU (the rewrite reads no
    device; Grappler's default cluster provisions a session: 7-25 ms a call). Raises
    TensorFlow's ``NotFoundError`` or ``InvalidArgumentError`` where it cannot shard."""
    from tensorflow.core.protobuf import (
        config_pb2,
        device_properties_pb2,
        meta_graph_pb2,
        rewriter_config_pb2,
    )
    from tensorflow.python.grappler import cluster as grappler_cluster
    from tensorflow.python.grappler import tf_optimizer

    sink = next(node for node in graph.node if node.op == "_Retval").input[0].split(":")[0]
    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph)
    meta.collection_def["train_op"].node_list.value.append(sink)
    config = config_pb2.ConfigProto()
    rewrites = config.graph_options.rewrite_options
    rewrites.optimizers.append("tf_auto_shard")
    rewrites.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    rewrites.fail_on_optimizer_errors = True
    optimizer = rewrites.custom_optimizers.add(name="tf_auto_shard")
    # every parameter the optimizer reads: a missing one aborts the process (a CHECK)
    for name, value in (("num_workers", num_workers), ("index", index),
                        ("auto_shard_policy", int(policy.value)), ("num_replicas", 0)):
        optimizer.parameter_map[name].i = value
    cpu = device_properties_pb2.NamedDevice(
        name="/job:localhost/replica:0/task:0/device:CPU:0",
        properties=device_properties_pb2.DeviceProperties(type="CPU"))
    with _GRAPPLER:
        cluster = grappler_cluster.Cluster(devices=[cpu])
        try:
            rewritten = tf_optimizer.OptimizeGraph(config, meta, verbose=False, cluster=cluster)
        finally:
            cluster.Shutdown()
    # Grappler writes a resource handle's constant (a shuffle's seed generator) as bytes; the
    # rewrite leaves constants as they were, so they are given back in the form read
    given = {node.name: node for node in graph.node if node.op == "Const"}
    for node in rewritten.node:
        if node.op == "Const" and node.attr["dtype"].type == _RESOURCE and node.name in given:
            node.attr["value"].CopyFrom(given[node.name].attr["value"])
    return rewritten


def tf_from_graph(graph: Any, element_spec: Any) -> Any:
    """A ``tf.data.Dataset`` from a ``GraphDef`` (as :func:`tf_graph` returns, its ``_Retval``
    pointing at the dataset wanted): ``dataset_from_graph`` and ``dataset_ops._VariantDataset``."""
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.ops import gen_experimental_dataset_ops

    variant = gen_experimental_dataset_ops.dataset_from_graph(graph.SerializeToString())
    return dataset_ops._VariantDataset(variant, element_spec)


def tf_source_tensors(ds: Any) -> list[Any]:
    """The tensors of every ``from_tensor_slices`` and ``from_tensors`` under ``ds``, depth
    first (``_TensorSliceDataset._tensors``, ``_TensorDataset._tensors``, found through each
    dataset's ``_inputs()``); none under a dataset rebuilt from a graph."""
    found, todo, seen = [], [ds], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node).__name__ in ("_TensorSliceDataset", "_TensorDataset"):
            found.extend(node._tensors)
        todo.extend(reversed(node._inputs()))
    return found


def tf_is_tensor_slices(ds: Any) -> bool:
    """Whether ``ds`` is a ``Dataset.from_tensor_slices`` (``from_tensor_slices_op.
    _TensorSliceDataset``): its rows are constants of its graph."""
    return type(ds).__name__ == "_TensorSliceDataset"


def tf_stateless(ds: Any) -> bool:
    """Whether a dataset of :func:`tf_one_to_one` holds no stateful op (TensorFlow's
    ``OpDef.is_stateful``: a random op that is not stateless, a ``py_function``, a variable)
    in its function, the functions it calls included; an ``Assert`` is allowed. True for a
    ``prefetch`` or ``with_options``."""
    from tensorflow.python.framework import op_def_registry

    if type(ds).__name__ not in ("_MapDataset", "_ParallelMapDataset"):
        return True
    graph = ds._map_func.function.graph.as_graph_def()
    called = {function.signature.name for function in graph.library.function}
    for node in [*graph.node, *(n for f in graph.library.function for n in f.node_def)]:
        op = op_def_registry.get(node.op)
        if node.op not in called and node.op != "Assert" and (op is None or op.is_stateful):
            return False
    return True


def tf_map_carrying(ds: Any) -> tuple[Any, Callable[[Any], Any]] | None:
    """For a ``map`` (with or without ``num_parallel_calls``) whose input and output are dense
    tensors: its input, and a function that maps another dataset of ``(element, extra)`` pairs,
    applying the same traced function to ``element`` and passing ``extra`` on. None for any
    other dataset."""
    import tensorflow as tf

    kind = type(ds).__name__
    if kind not in ("_MapDataset", "_ParallelMapDataset") or not all(
            isinstance(spec, tf.TensorSpec) for spec in tf.nest.flatten(
                (ds.element_spec, ds._input_dataset.element_spec))):
        return None
    function, spec = ds._map_func.function, ds.element_spec
    options: dict[str, Any] = {}
    if kind == "_ParallelMapDataset":
        options = {"num_parallel_calls": int(ds._num_parallel_calls),
                   "deterministic": {"true": True, "false": False}.get(ds._deterministic)}

    def apply(element: Any, extra: Any) -> tuple[Any, Any]:
        return tf.nest.pack_sequence_as(spec, tf.nest.flatten(function(
            *tf.nest.flatten(element)))), extra

    return ds._input_dataset, lambda pairs: pairs.map(apply, **options)


def tf_input_index(node: Any, name: str) -> int:
    """The position among ``node``'s inputs (a ``NodeDef`` of a tf.data graph) of its op's
    input argument ``name``, list arguments counted by their length: from the op's ``OpDef``,
    ``op_def_registry.get``."""
    from tensorflow.python.framework import op_def_registry

    index = 0
    for arg in op_def_registry.get(node.op).input_arg:
        if arg.name == name:
            return index
        if arg.type_list_attr:
            index += len(node.attr[arg.type_list_attr].list.type)
        elif arg.number_attr:
            index += node.attr[arg.number_attr].i
        else:
            index += 1
    raise ValueError(f"{node.op} has no input {name!r}")


def tf_save_iterator(iterator: Any, *, ignore_external_state: bool) -> bytes:
    """A tf.data iterator's checkpoint as bytes (what ``tf.train.Checkpoint`` writes of it):
    ``gen_dataset_ops.serialize_iterator`` of ``iterator._iterator_resource``."""
    import tensorflow as tf
    from tensorflow.python.ops import gen_dataset_ops

    policy = tf.data.experimental.ExternalStatePolicy
    with no_info_logs():  # TensorFlow logs each symbolic save at INFO: a line per batch
        state = gen_dataset_ops.serialize_iterator(
            iterator._iterator_resource,
            external_state_policy=(policy.IGNORE if ignore_external_state else policy.FAIL).value)
    return bytes(tf.io.serialize_tensor(state).numpy())


def tf_restore_iterator(iterator: Any, state: bytes) -> None:
    """Puts a fresh iterator of the same pipeline where :func:`tf_save_iterator` took ``state``:
    ``gen_dataset_ops.deserialize_iterator``."""
    import tensorflow as tf
    from tensorflow.python.ops import gen_dataset_ops

    gen_dataset_ops.deserialize_iterator(iterator._iterator_resource,
                                         tf.io.parse_tensor(state, tf.variant))


def tf_op_attrs(op: str) -> set[str]:
    """The attribute names of a TensorFlow op (``op_def_registry.get(op).attr``)."""
    from tensorflow.python.framework import op_def_registry

    return {attr.name for attr in op_def_registry.get(op).attr}


def tf_global_seed() -> int | None:
    """The seed ``tf.random.set_seed`` set (eagerly), or None: ``context.global_seed()``."""
    from tensorflow.python.eager import context

    seed = context.global_seed()
    return None if seed is None else int(seed)
