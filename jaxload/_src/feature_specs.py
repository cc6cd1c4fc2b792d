"""Features sharded beyond their rows: a layout's ``feature_specs`` checked against its mesh, a
batch's features checked against their specs, and the sharding of each leaf of a batch.

A feature spec is a ``PartitionSpec`` whose first entry is the batch axes (rows are sharded as
for every feature) and whose other entries shard the feature's other dimensions, e.g.
``P("data", "seq")`` for context parallelism.

Example:
  >>> from jax.sharding import Mesh, PartitionSpec
  >>> mesh = Mesh(np.array(jaxload.simulated_devices(2, 4)).reshape(4, 2), ("data", "seq"))
  >>> checked_specs(mesh, ("data",), {"tokens": PartitionSpec("data", "seq")})
  (('tokens', P('data', 'seq')),)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import jax
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from jaxload._src.topology import Device

FeatureSpecs: TypeAlias = tuple[tuple[str, PartitionSpec], ...]
"""``(top-level feature name, spec)`` pairs, sorted by name."""

Column: TypeAlias = tuple[int, str, int, int, int]
"""``(device id, feature, dim, block, blocks)``: the device holds block ``block`` of ``blocks``
equal blocks of dimension ``dim`` of the feature."""

Index: TypeAlias = tuple[slice, ...]  # the part of an array one device holds, per dim


def spec_axes(entry: str | Sequence[str] | None) -> tuple[str, ...]:
    """The mesh axes of one spec entry: ``None``, one axis name, or a tuple of names."""
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def batch_axes(sharding: NamedSharding) -> tuple[str, ...]:
    """The mesh axes a batch sharding splits the rows (dim 0) over."""
    return spec_axes(sharding.spec[0]) if len(sharding.spec) else ()


def _entry(axes: tuple[str, ...]) -> str | tuple[str, ...] | None:
    """A spec entry for ``axes``: None, one name, or a tuple of names."""
    return None if not axes else axes[0] if len(axes) == 1 else axes


def checked_specs(mesh: Mesh, batch_axes: tuple[str, ...],
                  feature_specs: dict[str, PartitionSpec] | None) -> FeatureSpecs:
    """``feature_specs`` as sorted pairs, or a ValueError/TypeError naming the feature."""
    if feature_specs is None:
        return ()
    if not isinstance(feature_specs, dict):
        raise TypeError(f"feature_specs must be a dict of feature name -> PartitionSpec, got "
                        f"{type(feature_specs).__name__}")
    items = sorted(feature_specs.items(), key=lambda kv: str(kv[0]))
    return tuple((name, _checked_spec(mesh, batch_axes, name, spec)) for name, spec in items)


def _checked_spec(mesh: Mesh, batch_axes: tuple[str, ...], name: object, spec: object
                  ) -> PartitionSpec:
    """One feature's spec, or an error naming it: rows first, then distinct axes of the mesh."""
    where = f"feature_specs[{name!r}]"
    if not isinstance(name, str):
        raise TypeError(f"{where}: feature names must be str (top-level dict keys)")
    if not isinstance(spec, PartitionSpec):
        raise TypeError(f"{where} must be a jax.sharding.PartitionSpec, got {spec!r}")
    if not len(spec) or spec_axes(spec[0]) != batch_axes:
        raise ValueError(
            f"{where}={spec} must start with the batch axes {batch_axes!r} (rows are "
            f"sharded as for every feature), e.g. PartitionSpec({_entry(batch_axes)!r}, ...)")
    used = [a for entry in spec for a in spec_axes(entry)]
    unknown = sorted(set(used) - set(mesh.axis_names))
    if unknown or len(set(used)) != len(used):
        raise ValueError(f"{where}={spec} must use distinct axes of the mesh, whose axes are "
                         f"{tuple(mesh.axis_names)!r}")
    return spec


def spec_shape_error(feature: str, spec: PartitionSpec, shape: tuple[int, ...],
                     mesh_shape: dict[str, int]) -> str | None:
    """Why ``spec`` cannot shard a feature whose rows have ``shape`` (None if it can)."""
    if len(spec) - 1 > len(shape):
        return (f"feature {feature} has shape {shape} per row (rank {len(shape)}), but its "
                f"spec {spec} shards {len(spec) - 1} dimensions after the batch dim")
    for dim, entry in enumerate(spec[1:], start=1):
        count = math.prod(mesh_shape[a] for a in spec_axes(entry))
        if shape[dim - 1] % count:
            return (f"feature {feature} has shape {shape} per row; its spec {spec} splits dim "
                    f"{dim} (size {shape[dim - 1]}) into {count} blocks over {entry!r}, which "
                    f"does not divide it. Pad that dimension to a multiple of {count}.")
    return None


def device_columns(mesh: Mesh | AbstractMesh, feature_specs: FeatureSpecs,
                   device_ids: Sequence[int]) -> tuple[Column, ...]:
    """Which block of each sharded non-batch dim the devices ``device_ids`` hold, for every
    feature spec, sorted by device id."""
    columns: list[Column] = []
    for name, spec in feature_specs:
        counts = [math.prod(mesh.shape[a] for a in spec_axes(e)) for e in spec]
        # a shape of one unit per block: each device's index start is its block number
        indices: Mapping[Device, Index] = NamedSharding(mesh, spec).devices_indices_map(
            tuple(counts))
        for device, index in indices.items():
            if device.id in device_ids:
                columns += [(device.id, name, dim, index[dim].indices(counts[dim])[0], counts[dim])
                            for dim in range(1, len(spec)) if counts[dim] > 1]
    return tuple(sorted(columns))


@functools.lru_cache(maxsize=256)
def leaf_shardings(treedef: jax.tree_util.PyTreeDef, sharding: NamedSharding,
                   feature_specs: FeatureSpecs) -> tuple[NamedSharding, ...]:
    """The sharding of each leaf of a batch structure: its top-level feature's spec (from
    ``feature_specs``, ``(name, PartitionSpec)`` pairs), or ``sharding``. Cached: it runs per
    step."""
    specs = dict(feature_specs)
    paths = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(treedef, [0] * treedef.num_leaves))[0]
    return tuple(_leaf_sharding(sharding, specs, feature_name(path)) for path, _ in paths)


def _leaf_sharding(sharding: NamedSharding, specs: dict[str, PartitionSpec],
                   feature: str | None) -> NamedSharding:
    spec = None if feature is None else specs.get(feature)
    return sharding if spec is None else NamedSharding(sharding.mesh, spec)


def feature_name(path: tuple[Any, ...]) -> str | None:
    """The top-level feature name of a leaf's pytree path (None outside a dict)."""
    key = path[0] if path else None
    name: str | None = key.key if isinstance(key, jax.tree_util.DictKey) else None
    return name
