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

With ``"pad"``, ``global_batch_size`` may also be smaller than the number of batch shards, or
not a multiple of it (eval on a large mesh): the batch placed on the devices then has
:func:`padded_batch_size` rows, its first ``global_batch_size`` rows real and the others padding
(``mask`` False). Each loading group reads only the real rows of its block
(:func:`rows_read`), so a group whose block is all padding reads nothing.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxload._src.assemble import aligned_empty
from jaxload._src.trees import HostBatch, PyTree
from jaxload._src.validate import is_positive_int

DROP = "drop"
PAD = "pad"
REMAINDER_MODES = (DROP, PAD)
"""The values of the loaders' ``remainder=`` option: ``"drop"`` (the default) and ``"pad"``.

Example:
  >>> jaxload.REMAINDER_MODES
  ('drop', 'pad')
"""
MASK = "mask"


def check_remainder(remainder: str) -> str:
    """Returns ``remainder`` if it is a known mode, else raises a ValueError listing them."""
    if remainder not in REMAINDER_MODES:
        raise ValueError(
            f"remainder={remainder!r} is not a remainder mode; valid modes: "
            + ", ".join(repr(m) for m in REMAINDER_MODES)
        )
    return remainder


def padded_batch_size(layout: Any, global_batch_size: int, remainder: str) -> int:
    """The rows placed on the devices per step: ``global_batch_size`` rounded up to a multiple
    of the layout's batch shards with ``"pad"``; with ``"drop"`` it must be one already.

    Example:
      >>> layout = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4))
      >>> padded_batch_size(layout, 12, "pad"), padded_batch_size(layout, 3, "pad")
      (16, 8)
    """
    shards = layout.num_batch_shards
    if not is_positive_int(global_batch_size):
        raise ValueError(f"global_batch_size={global_batch_size!r} must be a positive int")
    physical: int = -(-global_batch_size // shards) * shards
    if physical != global_batch_size and remainder != PAD:
        below = physical - shards
        raise ValueError(
            f"global_batch_size={global_batch_size} is not a multiple of the {shards} batch "
            f"shards of the layout, and remainder={remainder!r} cannot fill the difference. Use "
            f"a multiple of {shards} (e.g. {f'{below} or ' if below else ''}{physical}), or "
            f"remainder='pad': the batch then has {physical} rows, the last "
            f"{physical - global_batch_size} of them padding with mask=False.")
    return physical


def rows_read(plan: Any, global_batch_size: int) -> int:
    """Real rows of this process's block per step: the rows of ``plan.global_rows`` below
    ``global_batch_size``. 0 for a loading group that holds only padding.

    Example:
      >>> plans = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4)).plans(16)
      >>> [rows_read(p, 12) for p in plans]
      [8, 4]
    """
    start, stop = plan.global_rows
    return max(0, min(int(stop), global_batch_size) - int(start))


def check_padded_options(shard: bool, batched: bool, other: str | None = None) -> None:
    """A padded global batch (``global_batch_size`` not a multiple of the batch shards) is cut
    into the loading groups' real rows by jaxload, which needs the whole unbatched dataset:
    refuses ``shard=False``, ``batched=True`` and ``other`` (an option or input that cannot)."""
    refused = {"shard=False": not shard, "batched=True": batched, other: other is not None}
    for option, used in refused.items():
        if used:
            raise ValueError(
                "a global_batch_size that is not a multiple of the batch shards (padded with "
                f"remainder='pad') cannot be used with {option}: jaxload deals each loading "
                "group its real rows itself; pass the whole unbatched dataset (a "
                "tf.data.Dataset or grain.MapDataset) with shard=True")


def check_paddable(local_batch: HostBatch) -> None:
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


def pad_rows(local_batch: HostBatch, rows: int) -> HostBatch:
    """Each leaf zero-filled (or cut) to ``rows`` rows, plus ``"mask"``, True on real rows."""

    def pad(leaf: Any) -> np.ndarray:
        a: np.ndarray = np.asarray(leaf)
        if a.shape[0] == rows:
            return a
        out: np.ndarray = aligned_empty((rows,) + a.shape[1:], a.dtype)
        out[: a.shape[0]] = a
        out[a.shape[0] :] = 0
        return out

    real = len(jax.tree_util.tree_leaves(local_batch)[0])
    padded: dict[str, Any] = jax.tree_util.tree_map(pad, local_batch)  # a dict: check_paddable
    padded[MASK] = np.arange(rows) < real
    return padded


def unpad(tree: PyTree[Any], mask: Any) -> PyTree[np.ndarray]:
    """Keeps only the real rows (``mask`` True) of each leaf, as numpy arrays.

    ``tree`` and ``mask`` must be readable on this process: numpy arrays, fully addressable
    ``jax.Array``s, or arrays gathered with ``jax.experimental.multihost_utils.process_allgather``.

    Example:
      >>> import grain
      >>> ds = grain.MapDataset.range(20).map(lambda i: {"id": np.int32(i)})
      >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16,
      ...                             remainder="pad")
      >>> last = list(loader)[-1]                  # rows 16-19, then 12 rows of padding
      >>> jaxload.unpad(last["id"], last["mask"])
      array([16, 17, 18, 19], dtype=int32)

      With several processes a batch is not fully addressable; gather what you keep first:

      >>> from jax.experimental.multihost_utils import process_allgather
      >>> jaxload.unpad(process_allgather(last["id"]), process_allgather(last["mask"]))
      array([16, 17, 18, 19], dtype=int32)
    """
    keep = np.asarray(mask).astype(bool)
    kept: PyTree[np.ndarray] = jax.tree_util.tree_map(lambda a: np.asarray(a)[keep], tree)
    return kept


def undelivered_warning(undelivered: dict[str, int], step: int, local_batch_size: int,
                        exact: bool, groups: tuple[tuple[int, ...], ...] = ()) -> str:
    """What ``remainder="drop"`` left out at the end of a pass whose loading groups' pipelines
    differ in length (files split unevenly over the groups, per-host pipelines): ``undelivered``
    maps each process that had more to the batches it held beyond the pass's ``step`` count
    (``exact``: its length was known; else at least those it had read ahead); the processes of
    one of the ``groups`` (loading groups: the same rows) are named together.

    Example:
      >>> text = undelivered_warning({"0": 4}, 4, 4, exact=True)
      >>> text[text.index("and process"):text.index(". The")]
      'and process 0 had 4 more batches (16 rows) that were not delivered'
      >>> text = undelivered_warning({"0": 2, "2": 2}, 0, 4, exact=False, groups=((0, 2), (1, 3)))
      >>> text[:text.index(". The")]  # doctest: +NORMALIZE_WHITESPACE
      "remainder='drop': the pass ended before its first step, when a process had no full batch,
      and loading group 0 (processes 0 and 2, the same rows) had at least 2 more batches (8 rows:
      those read ahead; its length is not known) that were not delivered"
    """
    named: dict[str, int] = {}
    for index, group in enumerate(groups or tuple((int(p),) for p in undelivered)):
        held = [undelivered[str(p)] for p in group if str(p) in undelivered]
        if held:
            who = (f"process {group[0]}" if len(group) == 1 else f"loading group {index} "
                   f"(processes {', '.join(map(str, group[:-1]))} and {group[-1]}, the same rows)")
            named[who] = max(held)
    held_text = ", ".join(f"{who} {'had' if exact else 'had at least'} {n} more "
                          f"batch{'es' * (n != 1)} ({n * local_batch_size} rows"
                          f"{'' if exact else ': those read ahead; its length is not known'})"
                          for who, n in named.items())
    ended = f"after step {step - 1}, when a process had no full batch left" if step else (
        "before its first step, when a process had no full batch")
    return (f"remainder='drop': the pass ended {ended}, and {held_text} that were not "
            "delivered. The loading "
            "groups' pipelines differ in length (files split unevenly over the groups, per-host "
            "file lists with shard=False, a dataset_fn): remainder='pad' delivers every row once "
            "(the groups that run out pad, masked out), or even out the groups' shares.")


def no_step_warning(local_batch_size: int) -> str:
    """A whole pass with ``remainder="drop"`` that handed out no step, in words.

    Example:
      >>> no_step_warning(512)[:75]
      "remainder='drop': this pass had no step: a loading group had fewer than 512"
    """
    return (f"remainder='drop': this pass had no step: a loading group had fewer than "
            f"{local_batch_size} rows (its batch of each step: global_batch_size over the "
            "loading groups), and an incomplete batch is dropped. Give each group more rows "
            "(more data or files), a smaller global_batch_size, or remainder='pad'.")
