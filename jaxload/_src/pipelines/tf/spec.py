"""A tf.data pipeline's element spec, checked before any data is read."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxload._src.assemble import leaf_name
from jaxload._src.remainder import DROP, check_paddable
from jaxload._src.told import warn_once
from jaxload._src.trees import PyTree


def check_element_spec(ds: Any, batch_rows: int | None, remainder: str, graph: Any = None,
                       sizes: tuple[int, ...] = ()) -> None:
    """Rejects, before any data is read, features of ``ds`` that cannot form a static-shape
    jax.Array, and elements that ``remainder="pad"`` cannot add its ``"mask"`` to, unless there
    are none (the same error on every process at the build, not at the first step, where the
    first process to fail would end the others with a ``PeerFailedError``).

    ``batch_rows``: the leading dim every feature must have if the elements are batches already.
    ``graph``: ``ds``'s ``GraphDef``, where read: elements that a batch op made (the last op
    but one-to-one ones) are named in the error, and where their leading dim is one of
    ``sizes`` (the local and global batch sizes) though ``batch_rows`` is None, warned of.
    """
    import tensorflow as tf

    element_spec = ds.element_spec
    batches = batch_rows is None and graph is not None and batched_on_top(graph)
    leading = {spec.shape[0] if spec.shape.rank else None
               for spec in jax.tree_util.tree_leaves(element_spec)} if batches else set()
    if len(leading) == 1 and leading <= set(sizes):
        warn_once(f"the pipeline's elements are batches of {leading.pop()} rows (its last "
                  "op but maps and prefetches is a batch), and jaxload batches "
                  f"local_batch_size={sizes[0]} of them into each process's batch. If they are "
                  "per-process batches already, pass batched=True", key="batched elements")
    if remainder != DROP and int(ds.cardinality()) != 0:  # (one feature: an ndarray, as read)
        check_paddable(element_spec if isinstance(element_spec, (dict, tuple, list)) else (
            np.empty(0)))
    for path, spec in jax.tree_util.tree_flatten_with_path(element_spec)[0]:
        name = leaf_name(path)
        if not isinstance(spec, tf.TensorSpec):
            raise TypeError(
                f"feature {name} is a {type(spec).__name__}; only dense tensors can be loaded "
                "(convert ragged/sparse features to dense in the pipeline)")
        if spec.dtype in (tf.string, tf.variant, tf.resource):
            raise TypeError(
                f"feature {name} has dtype {spec.dtype.name}; only numeric and bool features can "
                "be loaded into jax.Arrays. Decode or drop it in the pipeline.")
        if batch_rows is not None:
            spec = _unbatched(spec, name, batch_rows, remainder)
        if not spec.shape.is_fully_defined():
            raise ValueError(
                f"feature {name} has shape {spec.shape} with unknown dimensions; jax.Arrays need "
                "static shapes. " + ("Its elements are batches (its last op but maps and "
                "prefetches is a batch): if they are per-process batches, pass batched=True; "
                "else unbatch them" if batches else "Pad or crop it to a fixed shape in the "
                "pipeline (e.g. tf.ensure_shape after padding)") + ".")


_THROUGH = {"MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2", "PrefetchDataset",
            "OptionsDataset", "ModelDataset", "MaxIntraOpParallelismDataset",
            "PrivateThreadPoolDataset", "AssertCardinalityDataset"}
_BATCHES = {"BatchDataset", "BatchDatasetV2", "PaddedBatchDataset", "PaddedBatchDatasetV2",
            "ParallelBatchDataset"}


def batched_on_top(graph: Any) -> bool:
    """Whether the dataset of ``graph`` (a ``GraphDef``) is a batch op under nothing but maps,
    prefetches and options: its elements are batches."""
    nodes = {node.name: node for node in graph.node}
    node = next((nodes.get(n.input[0].split(":")[0]) for n in graph.node if n.op == "_Retval"),
                None)
    while node is not None and node.op in _THROUGH and node.input:
        node = nodes.get(node.input[0].split(":")[0])
    return node is not None and node.op in _BATCHES


def _unbatched(spec: Any, name: str, batch_rows: int, remainder: str) -> Any:
    """An already-batched feature's spec without its leading dim, which must be ``batch_rows``."""
    import tensorflow as tf

    leading = spec.shape[0] if spec.shape.rank else "no leading dim"
    if leading is None and remainder == DROP:
        raise ValueError(
            f"feature {name} of the already-batched dataset has shape {spec.shape}: its batches "
            f"can have fewer rows than local_batch_size={batch_rows}, which remainder='drop' "
            f"does not pad. Batch it with drop_remainder=True (batch({batch_rows}, "
            f"drop_remainder=True), padded_batch({batch_rows}, ..., drop_remainder=True)); "
            "where its batches vary in size by design (group_by_window, "
            "bucket_by_sequence_length), pass remainder='pad'; or pass the unbatched dataset.")
    if leading != batch_rows and leading is not None:
        raise ValueError(
            f"feature {name} of the already-batched dataset has shape {spec.shape}; "
            f"with batched=True its leading dim must be local_batch_size={batch_rows} "
            f"(batch({batch_rows}, drop_remainder={remainder == DROP})"
            f"{'' if remainder == DROP else _KEEPS}), or pass the unbatched dataset.")
    return tf.TensorSpec(spec.shape[1:], spec.dtype)


def batch_spec(element_spec: Any, rows: int, batched: bool) -> PyTree[jax.ShapeDtypeStruct]:
    """A per-process batch of ``rows`` rows as ``jax.ShapeDtypeStruct`` leaves: nothing read."""
    spec: PyTree[jax.ShapeDtypeStruct] = jax.tree_util.tree_map(
        lambda s: jax.ShapeDtypeStruct((rows, *(s.shape[1:] if batched else s.shape)),
                                       s.dtype.as_numpy_dtype), element_spec)
    return spec


_KEEPS = ": remainder='pad' keeps each group's last, partial batch and pads it"
