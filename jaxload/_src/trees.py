"""What jaxload's pytrees hold.

A batch is a pytree: nested dicts, lists and tuples whose leaves are arrays. The alias says
which arrays: ``PyTree[np.ndarray]`` is one process's batch on the host (what a pipeline
yields), ``PyTree[jax.Array]`` a global batch on the devices (what a loader hands out), and
``PyTree[jax.ShapeDtypeStruct]`` its spec (:meth:`jaxload.Loader.batch_spec`).

Example:
  >>> from jaxload._src.trees import HostBatch
  >>> batch: HostBatch = {"image": np.zeros((4, 8, 8)), "label": np.zeros(4, np.int32)}
  >>> jax.tree_util.tree_structure(batch).num_leaves
  2
"""

from __future__ import annotations

from typing import Any, TypeAlias, TypeVar

import jax
import numpy as np

L = TypeVar("L")

PyTree: TypeAlias = L | dict[Any, "PyTree[L]"] | list["PyTree[L]"] | tuple["PyTree[L]", ...]
"""A leaf of type ``L``, or a dict / list / tuple of such pytrees."""

HostBatch: TypeAlias = PyTree[np.ndarray]
"""One process's batch on the host: numpy arrays whose leading dim is the per-process batch."""

GlobalBatch: TypeAlias = PyTree[jax.Array]
"""A global batch: ``jax.Array``\\ s whose leading dim is the global batch size."""

BatchSpec: TypeAlias = PyTree[jax.ShapeDtypeStruct]
"""A global batch's shapes, dtypes and shardings, before any data."""
