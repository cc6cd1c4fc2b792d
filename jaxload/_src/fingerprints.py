"""What a check compares across processes: a fingerprint of every addressable shard (XXH3-64 of
its bytes, shape and dtype: the same on every process and machine), with where it lies."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import jax
import numpy as np
import xxhash

from jaxload._src.assemble import leaf_name
from jaxload._src.trees import GlobalBatch


def fingerprint(data: np.ndarray) -> str:
    """A stable 64-bit fingerprint of an array's bytes, shape and dtype (hex).

    Example:
      >>> a = np.arange(4, dtype=np.int32)
      >>> jaxload.check.fingerprint(a) == jaxload.check.fingerprint(a.copy())
      True
      >>> jaxload.check.fingerprint(a) == jaxload.check.fingerprint(a.astype(np.int64))
      False
      >>> len(jaxload.check.fingerprint(a))
      16
    """
    # XXH3: about 60 times BLAKE2b's speed here (0.07 ms against 4.5 for 6 MB), and a check
    # hashes every local shard, a whole per-process batch; its output is stable across
    # machines and versions (xxHash >= 0.8)
    return hashed(xxhash.xxh3_64(), data)


def hashed(h: Any, data: np.ndarray) -> str:
    """``h`` (a ``hashlib``-like hash) of an array's dtype, shape and bytes, as hex."""
    add(h, data)
    return str(h.hexdigest())


def add(h: Any, data: np.ndarray) -> None:
    """Adds an array's dtype, shape and bytes to ``h`` (a ``hashlib``-like hash)."""
    data = np.asarray(data)
    h.update(f"{data.dtype.str}{data.shape}".encode())
    h.update(in_order(data))


def in_order(data: np.ndarray) -> np.ndarray:
    """The bytes of an array in their logical order (C-contiguous ``uint8``; no copy where it
    is C-contiguous). A strided one is copied a block at a time: its trailing axes that lie
    contiguous (a pixel's channels, a cropped row) are one item of a ``void`` dtype, so that
    numpy's copy moves blocks, not single values (a flipped 32x32x3 image: a third less time).

    Example:
      >>> image = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
      >>> flipped = image[:, ::-1]
      >>> in_order(flipped).tobytes() == np.ascontiguousarray(flipped).tobytes()
      True
    """
    blocks = data
    try:
        while blocks.ndim and blocks.strides[-1] == blocks.itemsize and blocks.shape[-1] > 1 and (
                not blocks.flags.c_contiguous):
            blocks = blocks.view(np.dtype((np.void, blocks.itemsize * blocks.shape[-1])))[..., 0]
    except (TypeError, ValueError):  # a view numpy refuses: value by value
        blocks = data
    return np.ascontiguousarray(blocks).reshape(-1).view(np.uint8)


class ShardRecord(NamedTuple):
    """One addressable shard as the processes compare it (a JSON list in a check's report)."""

    leaf: str  # the leaf's name in the batch
    start: int  # the rows [start, stop) it holds
    stop: int
    indices: str  # its full index (start and stop per dim), as JSON
    device: int  # the id of the device that holds it
    fingerprint: str
    constant: bool  # it holds a single repeated value (only computed for ``distinct``)


def shard_records(tree: GlobalBatch, constant_flags: bool) -> list[ShardRecord]:
    """Per addressable shard: leaf name, rows start and stop, full index, device id, fingerprint,
    and (only if ``constant_flags``, for ``distinct``) whether it holds a single repeated value."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not isinstance(leaf, jax.Array):
            raise TypeError(f"{leaf_name(path)} is a {type(leaf).__name__}, not a jax.Array")
        for shard in leaf.addressable_shards:
            index = [s.indices(n)[:2] for s, n in zip(shard.index, leaf.shape, strict=True)]
            start, stop = index[0] if index else (0, 1)
            data = np.asarray(shard.data)
            constant = constant_flags and bool(data.size == 0 or (data == data.flat[0]).all())
            out.append(ShardRecord(leaf_name(path), start, stop, json.dumps(index),
                                   shard.device.id, fingerprint(data), constant))
    return out
