"""What happens at the end of the data, when some processes have no full batch left.

Remainder modes (the ``remainder=`` option of :func:`jaxload.from_tf_data` and
:func:`jaxload.from_grain`):

- ``"drop"`` (default): the epoch ends, on every process, at the first step that some process
  cannot fill with a full per-process batch. Every step is full; the rows that the other
  processes still had are not delivered in this epoch.
- ``"pad"``: the epoch goes on until every process is exhausted. Rows that have no data are
  zero-filled, and each batch gets a bool feature ``"mask"`` of shape ``(global_batch_size,)``,
  True on real rows, so every element is delivered exactly once and shapes stay static (one
  compilation). Batches must be dicts (the mask is added as a key; an element that already has a
  ``"mask"`` key is refused); for tuple or array elements, map them to a dict first. Use
  :func:`unpad` to keep only the real rows of an output.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxload.assemble import aligned_empty

PyTree = Any

DROP = "drop"
PAD = "pad"
REMAINDER_MODES = (DROP, PAD)
MASK = "mask"


def check_remainder(remainder: str) -> str:
    """Returns ``remainder`` if it is a known mode, else raises a ValueError listing them."""
    if remainder not in REMAINDER_MODES:
        raise ValueError(
            f"remainder={remainder!r} is not a remainder mode; valid modes: "
            + ", ".join(repr(m) for m in REMAINDER_MODES)
        )
    return remainder


def check_paddable(local_batch: PyTree) -> None:
    """``"pad"`` adds a ``"mask"`` key, so batches must be dicts without one."""
    if not isinstance(local_batch, dict):
        raise TypeError(
            f"remainder='pad' adds a boolean 'mask' feature and needs dict elements; got "
            f"{type(local_batch).__name__} elements. Map them to a dict (e.g. "
            "ds.map(lambda x, y: {'x': x, 'y': y})) or use remainder='drop'."
        )
    if MASK in local_batch:
        raise ValueError(
            "remainder='pad' adds a feature named 'mask', but the elements already have a "
            "feature batch['mask']; rename it in the pipeline."
        )


def pad_rows(local_batch: PyTree, rows: int) -> PyTree:
    """Each leaf zero-filled (or cut) to ``rows`` rows, plus ``"mask"``, True on real rows."""

    def pad(a):
        a = np.asarray(a)
        if a.shape[0] == rows:
            return a
        out = aligned_empty((rows,) + a.shape[1:], a.dtype)
        out[: a.shape[0]] = a
        out[a.shape[0] :] = 0
        return out

    real = len(jax.tree_util.tree_leaves(local_batch)[0])
    padded = jax.tree_util.tree_map(pad, local_batch)
    padded[MASK] = np.arange(rows) < real
    return padded


def unpad(tree: PyTree, mask: Any) -> PyTree:
    """Keeps only the real rows (``mask`` True) of each leaf, as numpy arrays.

    ``tree`` and ``mask`` must be readable on this process: numpy arrays, fully addressable
    ``jax.Array``s, or arrays gathered with ``jax.experimental.multihost_utils.process_allgather``.

    Example:
      >>> loader = jaxload.from_grain(ds, layout, global_batch_size=64, remainder="pad")
      >>> for batch in loader:
      ...     logits = process_allgather(predict(params, batch))
      ...     kept = jaxload.unpad(logits, process_allgather(batch["mask"]))
    """
    keep = np.asarray(mask).astype(bool)
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[keep], tree)
