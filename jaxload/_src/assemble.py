"""Per-process numpy batch -> global ``jax.Array`` batch.

Each process holds ``plan.local_batch_size`` rows (its loading group's block of the global batch);
the result is, per leaf, one ``jax.Array`` of leading dim ``plan.global_batch_size`` on
``plan.sharding``. Built with ``jax.make_array_from_process_local_data``, which places each local
device's rows without any cross-process communication. (``jax.device_put`` must not be used here:
in multi-process JAX it assumes every process holds the same global value.)

Copies: ``make_array_from_process_local_data`` copies each device's rows from the host batch once
(on CPU devices not even that when the batch is 64-byte aligned, see :func:`aligned_empty`).
It was faster than splitting per device (``device_put`` of a list of slices +
``make_array_from_single_device_arrays``) at every batch size measured, so it is the
multi-process path. With a single process the whole batch is local, and one ``jax.device_put``
of all leaves is exact and faster still (``benchmarks/bench.py`` reports assembly vs memcpy).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeAlias, cast

import jax
import numpy as np

from jaxload._src.feature_specs import feature_name, leaf_shardings, spec_shape_error
from jaxload._src.plan import Plan
from jaxload._src.trees import GlobalBatch, HostBatch

# a non-batch dim and the indices of it this process's devices hold: a slice where contiguous
_HeldColumns: TypeAlias = tuple[tuple[int, slice | np.ndarray], ...]

# Kinds numpy uses for data JAX cannot hold: object, bytes, str, datetime, timedelta.
_UNSUPPORTED_KINDS = "OSUMm"
_ALIGN = 64  # bytes; the alignment XLA:CPU needs to use a host buffer without copying it


def leaf_name(path: tuple[Any, ...]) -> str:
    """A readable name for a pytree leaf: ``batch['image']``, ``batch[0]['label']``."""
    return "batch" + jax.tree_util.keystr(path)


def check_local_batch(
    local_batch: HostBatch, plan: Plan, *, partial: bool = False
) -> list[tuple[str, np.ndarray]]:
    """Validates a per-process batch and returns its leaves as named numpy arrays.

    Raises ``TypeError`` for a leaf JAX cannot hold (strings, objects) and ``ValueError`` for a
    scalar leaf or a leading dim other than ``plan.local_batch_size``, naming the leaf. With
    ``partial``, a last batch of fewer rows (the same for every leaf) is accepted.
    """
    named = []
    rows = None
    for path, leaf in jax.tree_util.tree_flatten_with_path(local_batch)[0]:
        name = leaf_name(path)
        array = np.asarray(leaf)
        if array.dtype.kind in _UNSUPPORTED_KINDS:
            example = f" (first value {array.flat[0]!r})" if array.size else ""
            raise TypeError(
                f"feature {name} has dtype {array.dtype}{example}; only numeric and bool "
                "features can be loaded into jax.Arrays. Encode or drop it in the pipeline."
            )
        full = array.ndim > 0 and array.shape[0] == plan.local_batch_size
        short = partial and array.ndim > 0 and 0 < array.shape[0] < plan.local_batch_size
        if not (full or short) or rows not in (None, array.shape[0]):
            expected = f"{'at most ' if partial else ''}local_batch_size={plan.local_batch_size}"
            raise ValueError(
                f"feature {name} has shape {array.shape}; a per-process batch needs leading dim "
                f"{expected}, the same for every feature (global_batch_size="
                f"{plan.global_batch_size} over {plan.shard_count} loading groups)"
            )
        rows = array.shape[0]
        named.append((name, array))
        _check_spec_fits(path, name, array, plan)
    if not named:
        raise ValueError("the batch has no array leaves")
    _check_specs_used(local_batch, plan)
    return named


Narrowed: TypeAlias = tuple[tuple[int, np.dtype, float, float], ...]


def narrowed(leaves: list[np.ndarray]) -> Narrowed:
    """``(index, the dtype JAX holds it in, its least and largest value)`` of each leaf that
    JAX narrows while ``jax_enable_x64`` is off: ``int64`` and ``uint64`` become 32 bits, and
    a value out of that range would wrap around with no error (3,000,000,000 arrives as
    -1,294,967,296); ``float64`` becomes ``float32``, and a finite value past its range would
    arrive as ``inf``."""
    found = []
    for index, leaf in enumerate(leaves):
        if leaf.dtype.kind in "iuf":
            held = np.dtype(jax.dtypes.canonicalize_dtype(leaf.dtype))
            if held.itemsize < leaf.dtype.itemsize:
                limits: Any = np.finfo(held) if held.kind == "f" else np.iinfo(held)
                number = float if held.kind == "f" else int
                found.append((index, held, number(limits.min), number(limits.max)))
    return tuple(found)


def check_in_range(local_batch: HostBatch, leaves: list[np.ndarray], narrowing: Narrowed
                   ) -> None:
    """A ValueError naming the feature where a leaf of :func:`narrowed` holds a value that its
    narrower dtype cannot (two reductions per such leaf and batch: about 2 us for 128 labels,
    50 us for 128 x 2,048 token ids, 75 us for 128 float64 images of 32x32x3). Floats: NaN
    and infinities pass (they stay what they are); a finite value that would become infinite
    does not."""
    for index, held, least, largest in narrowing:
        leaf = leaves[index]
        if not leaf.size:
            continue
        floats = leaf.dtype.kind == "f"
        low, high = (np.fmin.reduce(leaf, axis=None), np.fmax.reduce(leaf, axis=None)) if (
            floats) else (leaf.min(), leaf.max())  # (fmin, fmax: NaN left out)
        if low >= least and high <= largest:
            continue
        if floats:  # an infinity or NaN is not out of range: the finite values past it are
            finite = leaf[np.isfinite(leaf)]
            past = finite[np.abs(finite) > largest]
            if not past.size:
                continue
            low = high = past[np.argmax(np.abs(past))]
        value = low if low < least else high
        path = jax.tree_util.tree_flatten_with_path(local_batch)[0][index][0]
        spec = ".8g" if floats else "d"  # float32's limits as float32 shows them
        arrives = "inf" if floats and value > 0 else "-inf" if floats else np.array(
            value).astype(held)
        raise ValueError(
            f"feature {leaf_name(path)} holds {value} ({leaf.dtype}), outside the range of "
            f"{held} [{least:{spec}}, {largest:{spec}}]: with jax_enable_x64 off JAX holds "
            f"{leaf.dtype} as {held}, so it would arrive as {arrives} with no error. Enable "
            "64-bit types (jax.config.update('jax_enable_x64', True), before any array is "
            f"made) or {'scale' if floats else 'map'} the values into that range in the pipeline")


def _check_spec_fits(path: tuple[Any, ...], name: str, array: np.ndarray, plan: Plan) -> None:
    feature = feature_name(path)
    spec = dict(plan.feature_specs).get(feature) if feature is not None else None
    if spec is not None:
        error = spec_shape_error(name, spec, array.shape[1:], dict(plan.sharding.mesh.shape))
        if error:
            raise ValueError(error)


def _check_specs_used(local_batch: HostBatch, plan: Plan) -> None:
    """Every feature named in the layout's ``feature_specs`` must be a key of the batch."""
    features = set(local_batch) if isinstance(local_batch, dict) else set()
    missing = [name for name, _ in plan.feature_specs if name not in features]
    if missing:
        raise ValueError(
            f"the layout's feature_specs name feature {missing[0]!r}, but the batch has no such "
            f"top-level feature (its features: {sorted(map(str, features))}); feature_specs "
            "keys must be top-level keys of dict elements")


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized host array whose data starts on a 64-byte boundary.

    XLA:CPU uses such a buffer in place when it becomes a device buffer, and copies any other;
    so a batch written once into it reaches the devices with no further copy. (tf.data's
    buffers are aligned already; ``np.stack``'s are not.)

    Example:
      >>> aligned_empty((4, 3), np.float32).ctypes.data % 64
      0
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    out: np.ndarray = raw[start : start + nbytes].view(dtype).reshape(shape)
    return out


def assemble(local_batch: HostBatch, plan: Plan) -> GlobalBatch:
    """Turns this process's batch into a pytree of global ``jax.Array``s on ``plan.sharding``.

    Args:
      local_batch: a pytree (dict, tuple, nested) of arrays with leading dim
        ``plan.local_batch_size``: the rows ``plan.global_rows`` of the global batch.
      plan: this process's plan, from ``layout.plan(global_batch_size)``.

    Returns:
      The same pytree with each leaf a ``jax.Array`` of shape ``(global_batch_size, ...)``.

    Example:
      >>> layout = jaxload.data_parallel()
      >>> plan = layout.plan(global_batch_size=16)
      >>> batch = jaxload.assemble({"x": np.zeros((plan.local_batch_size, 3))}, plan)
      >>> batch["x"].shape
      (16, 3)
    """
    leaves = [array for _, array in check_local_batch(local_batch, plan)]
    check_in_range(local_batch, leaves, narrowed(leaves))
    return build_global(jax.tree_util.tree_structure(local_batch), leaves, plan)


def build_global(treedef: jax.tree_util.PyTreeDef, leaves: list[np.ndarray], plan: Plan
                 ) -> GlobalBatch:
    """``assemble`` for leaves already validated by :func:`check_local_batch`."""
    shardings = leaf_shardings(treedef, plan.sharding, plan.feature_specs)
    if plan.sharding.is_fully_addressable:
        # One process holds the whole batch, so device_put is exact here, and one call for all
        # leaves costs about half of one make_array_from_process_local_data per leaf.
        placed: GlobalBatch = jax.tree_util.tree_unflatten(
            treedef, jax.device_put(leaves, list(shardings)))
        return placed
    arrays: list[jax.Array] = []
    for leaf, sharding in zip(leaves, shardings, strict=True):
        shape = (plan.global_batch_size,) + leaf.shape[1:]
        for dim, held in _held_columns(sharding, shape):  # only what this process's devices hold
            leaf = leaf[(slice(None),) * dim + (held,)]
        arrays.append(jax.make_array_from_process_local_data(sharding, leaf, shape))
    batch: GlobalBatch = jax.tree_util.tree_unflatten(treedef, arrays)
    return batch


@functools.lru_cache(maxsize=256)
def _held_columns(sharding: jax.sharding.Sharding, shape: tuple[int, ...]) -> _HeldColumns:
    """Per non-batch dim of which this process's devices hold only part: the indices they hold
    (a slice where contiguous), in the order ``make_array_from_process_local_data`` expects: the
    distinct device blocks of that dim, ascending, one after the other."""
    # JAX types an index as optional, for shardings that cannot say; these always can
    indices = cast("list[tuple[slice, ...]]",
                   list(sharding.addressable_devices_indices_map(shape).values()))
    held: list[tuple[int, slice | np.ndarray]] = []
    for dim in range(1, len(shape)):
        blocks = sorted({index[dim].indices(shape[dim])[:2] for index in indices})
        if sum(b - a for a, b in blocks) == shape[dim]:
            continue
        if all(b[0] == a[1] for a, b in zip(blocks, blocks[1:], strict=False)):
            held.append((dim, slice(blocks[0][0], blocks[-1][1])))
        else:
            held.append((dim, np.concatenate([np.arange(a, b) for a, b in blocks])))
    return tuple(held)


def resharder(plan: Plan, layout: Any) -> Callable[[GlobalBatch], GlobalBatch] | None:
    """What moves an assembled batch to ``layout``'s shardings, where ``plan`` loaded it under
    others (``load_once``: every process loaded its own rows), or None.

    A reshard on device (``device_put`` of global arrays: no host data involved) is a
    cross-process collective, so the loader runs it on the loop's thread, in program order with
    the training step's collectives: issued from the prefetch thread, processes could launch
    collectives in different orders, or one could launch a reshard that another (stopped
    early) never joins.
    """
    if plan.sharding == layout.sharding:
        return None
    return lambda batch: jax.device_put(batch, layout.shardings(batch))
