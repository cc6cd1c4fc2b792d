"""A loader's global batch as ``jax.ShapeDtypeStruct``\\ s, before any data is handed out."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxload._src.layout import Layout, Plan
from jaxload._src.pipelines.base import Pipeline
from jaxload._src.remainder import MASK, check_paddable
from jaxload._src.trees import BatchSpec, PyTree

LeafSpecs = tuple[Any, list[tuple[tuple[int, ...], np.dtype[Any]]]]
"""A per-process batch's tree structure, and each leaf's feature shape (after the batch dim)
and dtype."""


def local_spec(pipeline: Pipeline, plan: Plan, pad: bool) -> LeafSpecs:
    """A per-process batch's structure and leaves, from the pipeline's spec or, where it has
    none, its first batch read from a fresh start (the loader's position does not move); with
    ``pad`` the ``mask`` too."""
    local: PyTree[Any] = pipeline.spec()
    if local is None:
        batches = iter(pipeline.batches(None))
        first = next(batches, None)
        close = getattr(batches, "close", None)
        if close is not None:
            close()
        if first is None:
            raise ValueError("the pipeline is empty: no batch to take the batch spec from")
        local = first[0]
    if pad:
        check_paddable(local)
        assert isinstance(local, dict)
        local = {**local, MASK: jax.ShapeDtypeStruct((plan.local_batch_size,), bool)}
    leaves, treedef = jax.tree_util.tree_flatten(local)
    shapes = []
    for leaf in leaves:
        if not hasattr(leaf, "dtype"):
            leaf = np.asarray(leaf)
        shapes.append((tuple(np.shape(leaf))[1:], np.dtype(leaf.dtype)))
    return treedef, shapes


def global_spec(local: LeafSpecs, plan: Plan, layout: Layout) -> BatchSpec:
    """The global batch of ``plan.global_batch_size`` rows, with the layout's shardings."""
    treedef, leaves = local
    rows = plan.global_batch_size
    tree = jax.tree_util.tree_unflatten(
        treedef, [jax.ShapeDtypeStruct((rows, *shape), dtype) for shape, dtype in leaves])
    spec: BatchSpec = jax.tree_util.tree_map(
        lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
        tree, layout.shardings(tree))
    return spec
