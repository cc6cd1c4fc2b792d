"""Every private attribute of JAX and Grain that jaxload reads, in one place.

Their public APIs lack what these give (the coordination service's client, the mesh of the
older ``with mesh:`` context, a ``grain.DataLoader``'s data source, sharding and operations, the
datasets that drop elements). Each accessor names the attribute it reads, and
``tests/test_compat.py`` fails loudly, naming it, when an upgrade removes one: the next JAX or
Grain release cannot break jaxload silently.
"""

from __future__ import annotations

from typing import Any

# (what reads it, the private path) for tests/test_compat.py
PRIVATE = (
    ("distributed_client", "jax._src.distributed.global_state.client"),
    ("thread_mesh", "jax._src.mesh.thread_resources.env.physical_mesh"),
    ("data_loader_source", "grain.DataLoader._data_source"),
    ("data_loader_shard_options", "grain.DataLoader._shard_options | ._sampler._shard_options"),
    ("data_loader_operations", "grain.DataLoader._operations"),
    ("drops_elements", "grain._src.python.dataset.transformations.filter.FilterMapDataset, "
                       "grain._src.python.dataset.transformations.flatmap.FlatMapMapDataset"),
)


def distributed_client() -> Any:
    """JAX's coordination-service client of this process (None before
    ``jax.distributed.initialize``): ``jax._src.distributed.global_state.client``."""
    from jax._src import distributed

    return distributed.global_state.client


def thread_mesh() -> Any:
    """The mesh of ``with mesh:`` on this thread (the older context; empty where unused):
    ``jax._src.mesh.thread_resources.env.physical_mesh``. None where JAX no longer has it."""
    from jax._src import mesh as mesh_lib

    env = getattr(getattr(mesh_lib, "thread_resources", None), "env", None)
    return getattr(env, "physical_mesh", None)


def data_loader_source(loader: Any) -> Any:
    """A ``grain.DataLoader``'s data source: ``loader._data_source``."""
    return loader._data_source


def data_loader_shard_options(loader: Any) -> Any:
    """How a ``grain.DataLoader`` shards: ``loader._shard_options`` or, in older Grain,
    ``loader._sampler._shard_options``."""
    options = getattr(loader, "_shard_options", None)
    return options if options is not None else loader._sampler._shard_options


def data_loader_operations(loader: Any) -> list[Any]:
    """A ``grain.DataLoader``'s operations (maps, batch): ``loader._operations``."""
    return list(loader._operations)


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
