"""Stacking elements into a per-process batch, with errors that name the feature at fault."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxload._src.assemble import aligned_empty, leaf_name
from jaxload._src.trees import HostBatch, PyTree


def stack_elements(elements: Sequence[PyTree[Any]]) -> HostBatch:
    """``np.stack`` of each feature over ``elements``; a ValueError naming what differs.

    Example:
      >>> stack_elements([{"x": np.zeros(2)}, {"x": np.ones(2)}])["x"].shape
      (2, 2)
    """
    try:
        batch: HostBatch = jax.tree_util.tree_map(_stack, elements[0], *elements[1:])
        return batch
    except (ValueError, TypeError) as e:
        raise ValueError(_describe_mismatch(elements)) from e


def _stack(*xs: Any) -> np.ndarray:
    first = xs[0]
    if not isinstance(first, np.ndarray) or first.ndim == 0:
        return np.asarray(xs)  # scalars: one C loop; a ragged or mixed list raises here
    shapes = {x.shape if isinstance(x, np.ndarray) else None for x in xs}
    if len(shapes) > 1:
        raise ValueError(f"the elements' shapes differ: {sorted(map(str, shapes))}")
    try:
        dtype = np.result_type(*xs)
    except TypeError:  # str, bytes, objects: refused later, naming the feature
        return np.stack(xs)
    # one copy, in C, straight into an aligned buffer: the only host copy on its way to CPU
    # devices (np.stack would also add an axis to every element in Python)
    out = aligned_empty((len(xs),) + first.shape, dtype)
    np.concatenate(xs, axis=0, out=out.reshape((-1,) + first.shape[1:]))
    return out


def _features(element: PyTree[Any]) -> dict[str, tuple[int, ...]]:
    return {
        leaf_name(path): np.shape(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(element)[0]
    }


def _describe_mismatch(elements: Sequence[PyTree[Any]]) -> str:
    first = _features(elements[0])
    for i, element in enumerate(elements[1:], start=1):
        features = _features(element)
        gone = sorted(set(first) - set(features))
        new = sorted(set(features) - set(first))
        if gone or new:
            changes = [f"feature {n} disappears" for n in gone] + [f"feature {n} appears" for n in new]
            return (f"the elements' structure changes within a batch: between element 0 and "
                    f"element {i}, {', '.join(changes)}. Every element needs the same features.")
        for name, shape in features.items():
            if shape != first[name]:
                return (f"feature {name} has shape {first[name]} in element 0 but {shape} in "
                        f"element {i} of the same batch; variable-length features need padding or "
                        "cropping to a fixed shape in the pipeline.")
    return "the elements of a batch could not be stacked: their structures differ"
