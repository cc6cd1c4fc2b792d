"""Grain's internals that jaxload reads (see :mod:`jaxload._src.compat`): a ``grain.DataLoader``'s
source, sharding and operations, and what a ``MapDataset``'s parents say."""

from __future__ import annotations

import sys
from typing import Any


def data_loader_source(loader: Any) -> Any:
    """A ``grain.DataLoader``'s data source: ``loader._data_source``."""
    return loader._data_source


def data_loader_shard_options(loader: Any) -> Any:
    """How a ``grain.DataLoader`` shards: ``loader._shard_options`` or, in older Grain,
    ``loader._sampler._shard_options``."""
    options = getattr(loader, "_shard_options", None)
    return options if options is not None else loader._sampler._shard_options


def data_loader_operations(loader: Any) -> list[Any]:
    """A ``grain.DataLoader``'s operations (maps, batch): ``loader._operations``. Grain 0.2.12
    replaces a final ``grain.transforms.Batch`` by its private ``BatchOperation`` when
    ``worker_count > 0`` (``grain._src.python.operations``); that one is given back as the
    ``grain.transforms.Batch`` it stands for."""
    import grain

    try:
        from grain._src.python import operations
    except ImportError:  # a Grain without it does not put it in
        operations = None
    replaced = getattr(operations, "BatchOperation", ())
    return [grain.transforms.Batch(op.batch_size, drop_remainder=op.drop_remainder)
            if isinstance(op, replaced) else op for op in loader._operations]


def data_loader_unread(loader: Any) -> tuple[int, int]:
    """(records never read, records the sampler holds) of a sharded ``grain.DataLoader``.

    Where Grain reads the sampler through its ``_SamplerMapDataset`` (0.2.18; not 0.2.12), each of
    ``shard_count`` shards reads ``len(sampler) // shard_count`` records, so the last
    ``len(sampler) % shard_count`` are never read, whatever ``drop_remainder`` says; older
    Grain reads each shard's indices to the sampler's end. (0, size) there, or where the
    sampler's size is unknown (no ``len``: it is endless)."""
    from grain._src.python import data_loader

    sampler = loader._sampler
    size = len(sampler) if hasattr(sampler, "__len__") else 0
    count = data_loader_shard_options(loader).shard_count
    if not hasattr(data_loader, "_SamplerMapDataset") or size == sys.maxsize:  # endless
        return 0, size
    return size % count, size


def data_loader_check_state(loader: Any, state: dict[str, Any]) -> None:
    """Grain's own check of an iterator state against a ``grain.DataLoader`` (its worker count,
    and its sampler's and source's ``repr``), which Grain makes at the first read after
    ``set_state``: ``loader._validate_state``, where this Grain has it; a ValueError."""
    validate = getattr(loader, "_validate_state", None)
    if validate is not None and all(k in state for k in ("worker_count", "sampler", "data_source")):
        validate(state)


def data_loader_sampler(loader: Any) -> Any:
    """A ``grain.DataLoader``'s sampler: ``loader._sampler``."""
    return loader._sampler


def grain_split_and_seeds(ds: Any) -> tuple[list[int] | None, list[int]]:
    """Along a Grain dataset's chain (each one's first parent) from the top: ``[start, step]``
    of the nearest slice (the user's own split: ``SliceMapDataset[start:stop:step]``, its
    ``str``), or None; and the seeds of the random maps above it (``RandomMapMapDataset._rng_pool._seed``,
    ``RandomMapIterDataset._seed``)."""
    from grain._src.python.dataset.transformations import map as map_ds
    from grain._src.python.dataset.transformations import slice as slice_ds

    seeds: list[int] = []
    while ds is not None:
        if isinstance(ds, slice_ds.SliceMapDataset):
            start, _, step = str(ds).partition("[")[2].rstrip("]").split(":")
            return [int(start), int(step)], seeds
        if isinstance(ds, (map_ds.RandomMapMapDataset, map_ds.RandomMapIterDataset)):
            seeds.append(int(ds._rng_pool._seed if hasattr(ds, "_rng_pool") else ds._seed))
        ds = next(iter(getattr(ds, "parents", ())), None)
    return None, seeds


def grain_below_maps(ds: Any) -> Any:
    """A Grain ``MapDataset`` below its top element-wise maps (``MapMapDataset``,
    ``MapWithIndexMapDataset``, ``RandomMapMapDataset``): element ``i`` of a map is its
    function of its parent's element ``i``, so the parent fixes the order at a fraction of the
    cost of reading through the maps (a decode, an augmentation)."""
    from grain._src.python.dataset.transformations import map as map_ds

    maps = tuple(getattr(map_ds, name) for name in (
        "MapMapDataset", "MapWithIndexMapDataset", "RandomMapMapDataset") if hasattr(map_ds, name))
    while isinstance(ds, maps) and len(getattr(ds, "parents", ())) == 1:
        ds = ds.parents[0]
    return ds


def drops_elements(ds: Any) -> bool:
    """Whether a Grain ``MapDataset`` has a ``filter`` or ``flat_map`` among its ancestors (they
    drop elements, so Grain cannot batch it by index), read from its ``parents`` graph."""
    from grain._src.python.dataset.transformations import filter as filter_ds
    from grain._src.python.dataset.transformations import flatmap as flatmap_ds

    dropping = (filter_ds.FilterMapDataset, flatmap_ds.FlatMapMapDataset)
    seen, to_check = set(), [ds]
    while to_check:
        current = to_check.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, dropping):
            return True
        to_check.extend(getattr(current, "parents", ()))
    return False
