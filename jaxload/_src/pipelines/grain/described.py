"""What a Grain pipeline shards, as the processes compare it in a pass's first round.

Each description (:class:`~jaxload._src.same_dataset.Described`) is a few hundred bytes, made
once per loader and sent in every pass's first round:

- a ``MapDataset``: its length and a hash of :data:`ELEMENTS` elements at indices every process
  draws alike from the length, read below its top maps (which keep the order, and may cost a
  decode per element), once per loader; and a hash of elements as the pipeline yields them (its
  top maps can decide what an index holds: paths listed per host, looked up by a shuffled
  index) at indices drawn anew for each pass (:func:`drawn`, from a seed every process
  shares), :data:`ELEMENTS` of them, fewer where that would be over 1% of a pass's reads
  (at least 2); each read twice (elements that change between readings are not compared);
- a ``DataLoader``: its sampler without the shard options, its source's length, its operations
  (their types), a hash of :data:`RECORDS` source records and of what its operations make of
  them, at indices drawn anew for each pass;
- an ``IterDataset`` split by elements: a hash of its first :data:`ELEMENTS` elements;
- a dataset the user split (``shard=False``): the seeds of its random maps after the split must
  differ between loading groups (the processes of one group compare their rows every step:
  :mod:`~jaxload._src.group_proof`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from jaxload._src import compat
from jaxload._src.fingerprints import hashed
from jaxload._src.pipelines.base import Batches
from jaxload._src.plan import Plan
from jaxload._src.same_dataset import ALL, GROUP, Described
from jaxload._src.state import LocalBatches
from jaxload._src.trees import HostBatch

ELEMENTS = 16  # elements of a MapDataset hashed
RECORDS = 4  # source records of a DataLoader hashed
Describe = Callable[[int], dict[str, Any]]  # of a seed every process shares, new each pass


def with_description(batches: LocalBatches, describe: Describe | None,
                     uneven: bool = False) -> LocalBatches:
    """``batches(position)``, each pass's source carrying ``describe`` and ``uneven`` (the
    group's own pipeline, ``shard=False``; see :class:`~jaxload._src.pipelines.base.Batches`)."""
    if describe is None and not uneven:
        return batches

    def described(position: Any) -> Iterable[tuple[HostBatch, Any]]:
        source = batches(position)
        if not isinstance(source, Batches):
            source = Batches(source)
        source.describe = describe or source.describe
        source.uneven = uneven
        return source

    return described


def map_dataset(ds: Any, plan: Plan, *, shard: bool, reads: bool = True) -> Describe | None:
    """A ``MapDataset``'s description (made on first use); None in a single process.
    ``reads=False``: this process's loading group holds only padding, so it reads no element
    through the top maps (the others compare theirs)."""
    if jax.process_count() == 1:
        return None
    split, seeds = compat.grain_split_and_seeds(ds)

    below = compat.grain_below_maps(ds)  # the same order, without the maps' cost
    below_maps = functools.cache(lambda: stable_hash(below, sample(len(below), ELEMENTS)))
    yielded = max(2, min(ELEMENTS, len(ds) // 200))  # read twice: 1% of a pass's reads

    def describe(seed: int) -> dict[str, Any]:
        same = {"length": len(ds), "elements": below_maps()}
        if below is not ds and reads:  # what the top maps make of a few
            same["yielded"] = stable_hash(ds, drawn(len(ds), yielded, seed))
        return Described(same, plan.shard_index, plan.shard_count, ALL if shard else GROUP,
                         split=split, seeds=None if shard else seeds).to_json()

    return describe


def iter_dataset(ds: Any, plan: Plan) -> Describe | None:
    """An ``IterDataset``'s (the user's split: its random maps' seeds); None in one process."""
    if jax.process_count() == 1:
        return None
    seeds = compat.grain_split_and_seeds(ds)[1]
    return lambda seed: Described({}, plan.shard_index, plan.shard_count, GROUP,
                                  seeds=seeds).to_json()


def stream(ds: Any, plan: Plan) -> Describe | None:
    """An ``IterDataset`` split by elements: a hash of its first :data:`ELEMENTS` elements as it
    yields them (read twice; None where two readings differ), compared between all processes,
    which must iterate the same stream. None in a single process."""
    if jax.process_count() == 1:
        return None

    @functools.cache
    def described() -> dict[str, Any]:
        def first() -> str | None:
            elements = list(itertools.islice(iter(ds), ELEMENTS))
            return hash_elements(elements, range(len(elements)))

        hashed = first()  # read twice: an unseeded random map cannot be compared
        same = {"first elements": hashed if hashed == first() else None}
        return Described(same, plan.shard_index, plan.shard_count, ALL).to_json()

    return lambda seed: described()  # its first elements, whatever the pass


def data_loader(loader: Any, plan: Plan, *, shard: bool) -> Describe | None:
    """A ``DataLoader``'s description (made on first use); None in a single process."""
    if jax.process_count() == 1:
        return None

    def describe(seed: int) -> dict[str, Any]:
        source = compat.data_loader_source(loader)
        length = len(source) if hasattr(source, "__len__") else None
        operations = compat.data_loader_operations(loader)
        indices = [] if length is None else drawn(length, RECORDS, seed)
        same = {"sampler": _sampler(compat.data_loader_sampler(loader)), "source_length": length,
                "operations": [_operation(op) for op in operations],
                "records": None if length is None else stable_hash(source, indices),
                "produced": None if length is None else stable_hash(
                    _Operated(source, operations), indices)}
        return Described(same, plan.shard_index, plan.shard_count,
                         ALL if shard else GROUP).to_json()

    return describe


def sample(length: int, count: int) -> list[int]:
    """``count`` indices of ``range(length)``: the first, the last, and between them the golden
    ratio's multiples modulo 1 (spread evenly, and with no period a file size could line up
    with): the same for the same length on every process, with any numpy.

    Example:
      >>> sample(100, 5)
      [0, 23, 61, 85, 99]
      >>> sample(3, 16)
      [0, 1, 2]
    """
    if length <= count:
        return list(range(length))
    drawn = {int((i * 0.6180339887498949) % 1 * length) for i in range(1, count - 1)}
    return sorted({0, length - 1} | drawn)


def drawn(length: int, count: int, seed: int) -> list[int]:
    """``count`` indices of ``range(length)`` (fewer where two draws meet) drawn from ``seed``
    (one per pass, the same on every process): the same with any numpy (BLAKE2b of the seed and
    the draw's number).

    Example:
      >>> drawn(1000, 4, seed=0), drawn(1000, 4, seed=0) == drawn(1000, 4, seed=0)
      ([34, 351, 815, 837], True)
      >>> drawn(1000, 4, seed=32) != drawn(1000, 4, seed=0)
      True
    """
    return sorted({int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(),
                                  "little") % length for i in range(min(count, length))})


def stable_hash(ds: Any, indices: Sequence[int]) -> str | None:
    """:func:`hash_elements`, or None where two readings differ (a map with unseeded
    randomness: its elements cannot be compared between processes)."""
    first = hash_elements(ds, indices)
    return first if first == hash_elements(ds, indices) else None


def hash_elements(ds: Any, indices: Sequence[int]) -> str | None:
    """A short hash of ``ds[i]`` for each index (their features' names, dtypes, shapes and
    bytes; Python objects by their type only), or None if one cannot be read here (the loader
    reports a failing element where it reads it).

    Example:
      >>> import grain
      >>> ds = grain.MapDataset.range(10)
      >>> hash_elements(ds.shuffle(seed=1), [0, 5]) != hash_elements(ds.shuffle(seed=2), [0, 5])
      True
    """
    digest = hashlib.sha256()
    for index in indices:
        try:
            element = ds[index]
        except Exception:  # noqa: BLE001 - reported where the loader reads it
            return None
        for path, leaf in jax.tree_util.tree_flatten_with_path(element)[0]:
            described = f"{index}{jax.tree_util.keystr(path)}{type(leaf).__name__}"
            leaf = np.asarray(leaf)
            digest.update(f"{described}{leaf.dtype}{leaf.shape}".encode())
            if not leaf.dtype.hasobject:
                digest.update(_leaf_hash(leaf).encode())
    return digest.hexdigest()[:16]


def _leaf_hash(leaf: np.ndarray) -> str:
    """BLAKE2b (8 bytes, hex) of a leaf's dtype, shape and bytes. A Grain state holds a hash
    built from these, so it must not change between versions of jaxload (the run-time checks'
    ``check.fingerprint`` is free to)."""
    return hashed(hashlib.blake2b(digest_size=8), leaf)


def _sampler(sampler: Any) -> str | None:
    """The sampler's repr without its shard options (each group's own); None where the repr
    names an object's address, which differs between processes."""
    text = re.sub(r"shard_options=\w+\([^)]*\),?\s*", "", repr(sampler))
    return None if " at 0x" in text else text


class _Operated:
    """``source[i]`` through a DataLoader's operations up to its first ``Batch`` (a ``RandomMap``
    draws from a generator seeded by ``i``, the same on every process; a record a ``Filter``
    drops reads as None; an operation of another kind ends the chain there), so that the
    processes compare what the operations make of a few records, not only their types."""

    def __init__(self, source: Any, operations: Sequence[Any]):
        self._records, self._chain = source, operations

    def __getitem__(self, index: int) -> Any:
        import grain

        element = self._records[index]
        for op in self._chain:
            if isinstance(op, grain.transforms.Filter):
                if not op.filter(element):
                    return None
            elif isinstance(op, grain.transforms.Map):
                element = op.map(element)
            elif isinstance(op, grain.transforms.RandomMap):
                element = op.random_map(element, np.random.default_rng(index))
            elif isinstance(op, grain.transforms.MapWithIndex):
                element = op.map_with_index(index, element)
            else:  # a Batch, or an operation read no further
                break
        return element


def _operation(op: Any) -> str:
    """An operation by its type, and a Batch by its size (a lambda's repr differs by process)."""
    name = f"{type(op).__module__}.{type(op).__qualname__}"
    size = getattr(op, "batch_size", None)
    return name if size is None else f"{name}({size}, drop_remainder={op.drop_remainder})"
