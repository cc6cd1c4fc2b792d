"""A Grain ``IterDataset``: iterated, with Grain's own iterator state as the position.

Split over several loading groups (``shard=True``, the default) it is split by elements: every
process iterates the whole dataset and keeps elements ``k, k + K, ...`` (whole batches, with
``batched=True``), so step ``s`` holds the stream's elements ``[s·G, (s+1)·G)``, as a
``MapDataset`` split by index does. That reads every element on every process (a warning says
so once); the processes compare the stream's first elements in the first round, and where
checks are on (the default), the digest of every step's global batch before any process hands
the step out (:func:`split` with ``prove``), so that a stream that differs by process later on
is refused at that step, not delivered."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np
import xxhash

from jaxload._src.adapters.stack import stack_elements
from jaxload._src.fingerprints import add
from jaxload._src.pipelines.base import Batches, LocalSpec
from jaxload._src.pipelines.grain import described
from jaxload._src.plan import Plan
from jaxload._src.remainder import DROP, PAD
from jaxload._src.state import Elastic
from jaxload._src.told import warn_each, warn_once
from jaxload._src.trees import HostBatch

NOT_ELASTIC = ("a grain.IterDataset cannot start at a given element without reading every "
               "element before it, and its position is each process's own iterator; pass its "
               "source MapDataset (with shard=True) so that jaxload can slice it")


class GrainIterDataset:
    """An ``IterDataset``, batched: this loading group's own (``shard=False``), or the whole
    dataset split by elements (``shard=True``; see the module docstring).

    It has no length and cannot read by index; it resumes on the same plan only (Grain's
    iterator state), since it cannot start at a global row. Loading groups whose random maps
    after the user's split have the same seeds are refused (they would draw the same random
    sequence; :mod:`~jaxload._src.pipelines.grain.described`).
    """

    backend: str = "grain"
    by_index: bool = False
    not_resumable: str | None = None

    def __init__(self, ds: Any, plan: Plan, *, shard: bool, batched: bool, remainder: str,
                 prove: bool = False):
        self.elastic = Elastic(why_not=NOT_ELASTIC)
        describe = described.stream(ds, plan) if shard else described.iter_dataset(
            ds, plan)
        batches: Callable[[Any], Iterable[tuple[HostBatch, Any]]]
        if not shard or plan.shard_count == 1:  # the group reads it all: Grain batches it
            batches = iterated(batched_iter(ds, plan.local_batch_size, batched, remainder))
        else:
            _warn_split(plan)
            batches = split(ds, plan.shard_index, plan.shard_count,
                            1 if batched else plan.local_batch_size, batched, remainder,
                            prove=prove)
        self.batches = described.with_description(batches, describe, uneven=not shard)

    def spec(self) -> LocalSpec | None:
        return None


def batched_iter(ds: Any, rows: int, batched: bool, remainder: str) -> Any:
    """``ds`` batched to ``rows`` rows (jaxload's aligned stacking), unless it is batched."""
    if batched:
        return ds
    return ds.batch(rows, drop_remainder=remainder == DROP, batch_fn=stack_elements)


def dropped_counted(ds: Any, rows: int, group: int) -> Callable[[Any], Batches]:
    """``batches(position)`` of ``ds`` (a filtered share, with ``remainder="drop"``) in full
    batches of ``rows``; when a pass ends as the processes agreed, its kept rows that were not
    delivered (those read ahead, the rest of the share, a last partial batch) are counted, which
    reads the rest of the share, and named in a warning."""
    batches = iterated(batched_iter(ds, rows, False, PAD))  # the partial batch too

    def local(position: Any) -> Batches:
        source, counts = batches(position), {"delivered": 0, "left": 0}

        def full() -> Iterator[tuple[HostBatch, Any]]:
            for batch, state in source:
                if (n := batch_rows(batch)) < rows:  # the last, partial: dropped
                    counts["left"] += n
                    return
                counts["delivered"] += rows
                yield batch, state

        def ended(unused: int) -> None:
            counts["delivered"] -= unused * rows
            left = counts["left"] + unused * rows + sum(batch_rows(b) for b, _ in source)
            if left:
                warn_each(_dropped(group, left, counts["delivered"], rows))  # each pass

        return Batches(full(), ended=ended)

    return local


def batch_rows(batch: HostBatch) -> int:
    """The rows of a batch (its first leaf's leading dim)."""
    return len(jax.tree_util.tree_leaves(batch)[0])


def _dropped(group: int, left: int, delivered: int, rows: int) -> str:
    """What a filtered split with ``remainder="drop"`` did not deliver this pass, in words."""
    drift = (" Its count drifted far from the group that ran out first: the filter keeps a "
             "different share of each group's indices (group k filters indices k, k + K, ...), "
             "as one that depends on the index does; a shuffle before the filter evens that "
             "out." if left > max(rows, delivered // 10) else "")
    return (f"from_grain(remainder='drop') over a filtered MapDataset: the pass ended when a "
            f"loading group ran out of kept rows, and loading group {group} (this process's) "
            f"had {left} kept rows left that it did not deliver ({delivered} delivered).{drift} "
            "remainder='pad' delivers every kept row once.")


def iterated(ds: Any) -> Callable[[Any], Iterator[tuple[HostBatch, Any]]]:
    """``batches(position)`` of an ``IterDataset``, with Grain's iterator state after each."""

    def batches(position: Any) -> Iterator[tuple[HostBatch, Any]]:
        iterator = iter(ds)
        if position is not None:
            iterator.set_state(position)
        for batch in iterator:
            yield batch, iterator.get_state()

    return batches


def split(ds: Any, k: int, groups: int, rows: int, batched: bool, remainder: str,
          prove: bool = False) -> Callable[[Any], Iterable[tuple[HostBatch, Any]]]:
    """``batches(position)`` of loading group ``k`` of ``groups``: elements ``k, k + groups,
    ...`` of ``ds``, ``rows`` to a batch (stacked; one whole element with ``batched``), each with
    the iterator's state after its last element. From a saved state the next element of this
    group is ``groups - 1`` elements on (the state was taken right after one of its own).

    ``prove``: each batch also carries the digest of the global batch it was kept from (XXH3 of
    each element's leaves, names, dtypes and shapes; :mod:`~jaxload._src.stream_proof`), which
    every process compares before it hands the step out: the stream itself is the proof that
    every process read the same elements."""

    def batches(position: Any) -> Iterable[tuple[HostBatch, Any]]:
        iterator = iter(ds)
        ahead = 0  # the elements before this group's first of the next global batch
        if position is not None:
            iterator.set_state(position)
            ahead = groups - 1 - k
        return Batches(_steps(iterator, ahead, k, groups, rows, batched, remainder), proves=True
                       ) if prove else _unproved(iterator, position, k, groups, rows, batched,
                                                 remainder)

    return batches


def _steps(iterator: Any, ahead: int, k: int, groups: int, rows: int, batched: bool,
           remainder: str) -> Iterator[Any]:  # (batch, state, (digest, fingerprints))
    """Whole global batches read (``groups * rows`` elements), this group's rows kept; each
    batch with the state after its last row and the global batch's digest and fingerprints."""
    for _ in range(ahead):  # the rest of the global batch before a saved state's position
        if next(iterator, _END) is _END:
            return
    last = k + groups * (rows - 1)  # this group's last element of a full global batch
    while True:
        read: list[Any] = []
        state = None
        for i in range(groups * rows):
            element = next(iterator, _END)
            if element is _END:
                break
            read.append(element)
            if i == last:
                state = iterator.get_state()
        taken = read[k::groups]
        if not taken or len(taken) < rows and remainder == DROP:
            return
        batch = taken[0] if batched else stack_elements(taken)
        stacked = None if batched else jax.tree_util.tree_leaves(batch)
        prints = b"".join(element_print(e, stacked, i // groups) if i % groups == k else (
            element_print(e)) for i, e in enumerate(read))
        yield (batch, state if state is not None else iterator.get_state(),
               (xxhash.xxh3_64(prints).hexdigest(), prints))
        if len(taken) < rows:
            return


def element_print(element: Any, stacked: list[np.ndarray] | None = None, row: int = 0) -> bytes:
    """8 bytes of XXH3 over an element: its structure, then each leaf's dtype, shape and bytes
    (Python objects by their type only). ``stacked``: the leaves of the batch this process
    stacked the element into, at ``row``: an array leaf's bytes are read there where the row
    has its dtype and shape (the same bytes, contiguous and just copied, where the element's
    may be a strided view that would need a copy of its own).

    Example:
      >>> element = {"x": np.arange(6.0).reshape(2, 3)[:, ::-1], "y": 1}
      >>> batch = {"x": np.stack([np.zeros((2, 3)), element["x"]]), "y": np.array([0, 1])}
      >>> element_print(element) == element_print(element, jax.tree_util.tree_leaves(batch), 1)
      True
    """
    leaves, treedef = jax.tree_util.tree_flatten(element)
    h = xxhash.xxh3_64(_structure(treedef))
    for n, leaf in enumerate(leaves):
        if type(leaf) is not np.ndarray:
            leaf = np.asarray(leaf)
        elif stacked is not None and leaf.ndim and stacked[n].dtype == leaf.dtype and (
                stacked[n].shape[1:] == leaf.shape):
            leaf = stacked[n][row]
        if leaf.dtype.hasobject:
            h.update(f"{leaf.dtype}{leaf.shape}".encode())
        elif leaf.flags.c_contiguous:  # what fingerprints.add hashes, a third faster a row
            h.update(_header(leaf.dtype, leaf.shape))
            try:
                h.update(leaf)  # its buffer: the same bytes, without a view made first
            except (TypeError, ValueError, BufferError):  # a dtype no buffer holds (datetime64)
                h.update(leaf.reshape(-1).view(np.uint8))
        else:
            add(h, leaf)  # its dtype, shape and bytes, copied in blocks
    return h.digest()


@functools.lru_cache(maxsize=64)
def _structure(treedef: Any) -> bytes:
    return str(treedef).encode()


@functools.lru_cache(maxsize=256)
def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    return f"{dtype.str}{shape}".encode()


def _unproved(iterator: Any, position: Any, k: int, groups: int, rows: int, batched: bool,
              remainder: str) -> Iterator[tuple[HostBatch, Any]]:
    skip = k if position is None else groups - 1
    while True:
        taken: list[Any] = []
        for _ in range(rows):
            element = next(itertools.islice(iterator, skip, None), _END)
            if element is _END:
                break
            taken.append(element)
            skip = groups - 1
        if not taken or len(taken) < rows and remainder == DROP:
            return
        yield (taken[0] if batched else stack_elements(taken)), iterator.get_state()
        if len(taken) < rows:
            return


_END = object()


def _warn_split(plan: Plan) -> None:
    warn_once(
        f"from_grain splits a grain.IterDataset by elements over {plan.shard_count} loading "
        f"groups: every process reads every element and keeps 1/{plan.shard_count} of them "
        "(an IterDataset cannot be read by index). To read only each group's share, pass its "
        "source MapDataset (jaxload slices it by index), or split it yourself before "
        ".to_iter_dataset() and pass shard=False.", stacklevel=4)
