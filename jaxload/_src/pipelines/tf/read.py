"""A tf.data pipeline's graph read without the rows of the ``from_tensor_slices`` under it
(:func:`read_graph`): a build that costs the same whatever the data's size."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from jaxload._src import compat
from jaxload._src.pipelines.tf.graph import DatasetGraph


def read_graph(ds: Any) -> DatasetGraph:
    """``DatasetGraph.of(ds)``, without serializing the rows of a ``from_tensor_slices`` under
    it: where ``ds`` is such a source under shuffles and one-to-one ops (the tutorials' shapes),
    the graph is read from the same pipeline over a source of no rows of the same element
    spec, rebuilt from the dataset objects (microseconds). Its ops, functions, seeds and
    options are the pipeline's own; tf.data's own graph would copy every row (about 7 ms per
    MB: 2 s for 300 MB of images). Other pipelines are read whole.

    Example:
      >>> import tensorflow as tf
      >>> rows = {"image": np.zeros((50_000, 32, 32, 3), np.float32)}
      >>> ds = tf.data.Dataset.from_tensor_slices(rows).shuffle(64, seed=1).map(lambda e: e)
      >>> sorted(op for op in read_graph(ds).ops() if "Dataset" in op)
      ['MapDataset', 'ShuffleDatasetV3', 'TensorSliceDataset']
    """
    import tensorflow as tf

    rebuild: list[Callable[[Any], Any]] = []
    node = ds
    while (op := compat.tf_op(node))[0] != "slices":
        kind, found = op
        if kind == "shuffle":
            node, size, seed, seed2, reshuffles = found
            rebuild.append(functools.partial(compat.tf_shuffled, buffer_size=size,
                                             seeds=(seed, seed2), reshuffle=reshuffles))
        elif kind == "one_to_one":
            node, again = found
            rebuild.append(again)
        else:
            return DatasetGraph.of(ds)
    specs = tf.nest.flatten(node.element_spec)
    if not all(type(spec) is tf.TensorSpec and spec.shape.is_fully_defined() for spec in specs):
        return DatasetGraph.of(ds)
    empty = tf.nest.map_structure(lambda spec: tf.zeros([0, *spec.shape], spec.dtype),
                                  node.element_spec)
    light = tf.data.Dataset.from_tensor_slices(empty)
    for again in reversed(rebuild):
        light = again(light)
    graph = DatasetGraph.of(light, ds.options())
    if {op for op in graph.ops() if "Dataset" in op} - _LIGHT:  # a dataset in a function
        return DatasetGraph.of(ds)  # (nothing is ever built from a graph without its rows)
    return graph


# the dataset ops a graph read without its rows may hold: none that a build rewrites (a file
# read, a cache, an interleave, a shard hint), so a pipeline is built from a graph read whole
_LIGHT = frozenset({"TensorSliceDataset", "ShuffleDatasetV3", "MapDataset", "ParallelMapDatasetV2",
                    "PrefetchDataset", "OptionsDataset"})


def with_options_of(ds: Any, rebuilt: Any) -> Any:
    """``rebuilt`` with ``ds``'s options (the ops rebuilt from dataset objects do not carry
    the options set below them), where they are not the default ones."""
    import tensorflow as tf

    options = ds.options()
    return rebuilt if options == tf.data.Options() else rebuilt.with_options(options)
