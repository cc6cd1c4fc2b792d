"""Layouts (a mesh plus the mesh axes that shard the batch) and the loading plan they imply.

Everything here is index arithmetic over a topology: which device sits on which process. It runs
the same on real devices (``jax.devices()``) and on a simulated topology
(:func:`simulated_devices`), so a 512-process plan can be computed without starting a process.

Vocabulary (the JAX guide "Distributed data loading"):

- *global batch*: the rows of one training step over all devices (``global_batch_size``).
- *batch shard* / *per-replica batch*: the block of rows one device holds; devices of one model
  replica hold the same batch shard.
- *loading group*: the processes whose devices need the same rows. Each group loads one
  ``1/shard_count`` of the data; every process of a group loads the same rows.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxload._src import meshes

Device = Any  # a jax.Device or a SimulatedDevice: anything with .id and .process_index
RowRange = tuple[int, int]  # [start, stop) rows of a batch
FeatureSpecs = tuple[tuple[str, PartitionSpec], ...]  # (top-level feature name, spec), by name
# (device id, feature, dim, block, blocks): the device holds block ``block`` of ``blocks`` equal
# blocks of dimension ``dim`` of the feature
Column = tuple[int, str, int, int, int]


@dataclasses.dataclass(frozen=True)
class SimulatedDevice:
    """A stand-in for a ``jax.Device`` on a topology that is planned but not started.

    Example:
      >>> devices = jaxload.simulated_devices(num_processes=4, local_devices=2)
      >>> devices[3]
      SimulatedDevice(id=3, process_index=1, platform='cpu')
    """

    id: int
    process_index: int
    platform: str = "cpu"

    @property
    def device_kind(self) -> str:
        """What JAX (0.12) reads to describe a mesh's devices abstractly."""
        return "simulated"


def simulated_devices(num_processes: int, local_devices: int) -> list[SimulatedDevice]:
    """``num_processes * local_devices`` simulated devices, numbered process by process.

    Pass them as ``devices=`` to any layout constructor to plan that topology in one process.

    Example:
      >>> devices = jaxload.simulated_devices(4, 2)
      >>> layout = jaxload.model_replicas_across_processes(2, devices=devices)
      >>> [p.shard_index for p in layout.plans(global_batch_size=16)]
      [0, 1, 0, 1]
    """
    for name, value in (("num_processes", num_processes), ("local_devices", local_devices)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return [
        SimulatedDevice(id=p * local_devices + d, process_index=p)
        for p in range(num_processes)
        for d in range(local_devices)
    ]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one process loads for a global batch, and where each of its rows goes.

    Attributes:
      global_batch_size: rows per step over all devices.
      process_index: the process this plan is for.
      shard_index: index of this process's loading group; shard the data by
        ``(shard_index, shard_count)``, never by ``process_index``.
      shard_count: number of loading groups (distinct per-process row blocks).
      local_batch_size: rows this process loads per step (``global_batch_size // shard_count``).
      num_batch_shards: number of distinct per-replica batches in the global batch.
      per_replica_batch_size: rows per batch shard (``global_batch_size // num_batch_shards``).
      global_rows: ``[start, stop)`` rows of the global batch that this process loads.
      device_rows: ``(device_id, start, stop)`` per addressable device, rows relative to the
        per-process batch, sorted by device id.
      loading_groups: the process indices of each loading group, in ``shard_index`` order.
      sharding: the ``NamedSharding`` of the batch dimension this plan was derived from.
      feature_specs: ``(feature, PartitionSpec)`` of the features the layout shards beyond
        their rows (see :class:`Layout`), by name.
      device_columns: ``(device_id, feature, dim, block, blocks)`` per addressable device and
        sharded non-batch dimension: the device holds block ``block`` of ``blocks`` equal blocks
        of that dimension (the columns), sorted by device id.

    Example:
      >>> layout = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4))
      >>> plan = layout.plan(global_batch_size=16, process_index=1)
      >>> plan.shard_index, plan.shard_count, plan.local_batch_size, plan.global_rows
      (1, 2, 8, (8, 16))
    """

    global_batch_size: int
    process_index: int
    shard_index: int
    shard_count: int
    local_batch_size: int
    num_batch_shards: int
    per_replica_batch_size: int
    global_rows: RowRange
    device_rows: tuple[tuple[int, int, int], ...]
    loading_groups: tuple[tuple[int, ...], ...]
    sharding: NamedSharding = dataclasses.field(repr=False, compare=False)
    feature_specs: FeatureSpecs = ()
    device_columns: tuple[Column, ...] = ()

    def sharding_of(self, feature: str | None) -> NamedSharding:
        """The sharding of a top-level feature: its spec's, else the batch sharding."""
        spec = dict(self.feature_specs).get(feature)
        return self.sharding if spec is None else NamedSharding(self.sharding.mesh, spec)

    def explain(self, *, max_processes: int = 16) -> str:
        """Tables of the loading groups and of the rows each device holds (needs ``rich``).

        The same text as ``jaxload plan`` on the command line.

        Example:
          >>> devices = jaxload.simulated_devices(4, 2)
          >>> plan = jaxload.model_replicas_across_processes(2, devices=devices).plan(16)
          >>> print(plan.explain().splitlines()[1])
          global batch 16 rows = 4 per-replica batches of 4; 2 loading groups of 8 rows each
        """
        from jaxload._src import explain  # presentation lives outside the arithmetic

        return explain.text(self, max_processes=max_processes)

    def __post_init__(self):
        if self.local_batch_size * self.shard_count != self.global_batch_size:
            raise ValueError(
                f"local_batch_size={self.local_batch_size} x shard_count={self.shard_count} "
                f"!= global_batch_size={self.global_batch_size}"
            )
        if not 0 <= self.shard_index < self.shard_count:
            raise ValueError(f"shard_index={self.shard_index} not in [0, {self.shard_count})")
        if self.global_rows != (
            self.shard_index * self.local_batch_size,
            (self.shard_index + 1) * self.local_batch_size,
        ):
            raise ValueError(
                f"global_rows={self.global_rows} is not block {self.shard_index} of "
                f"{self.shard_count} blocks of {self.local_batch_size} rows"
            )


@dataclasses.dataclass(frozen=True)
class Layout:
    """A mesh, the mesh axes the batch (leading) dimension is sharded over, and optionally how
    some features are sharded beyond their rows.

    The batch is split over ``batch_axes`` and replicated over the other mesh axes; trailing
    dimensions are replicated. Any mesh works if each process's devices hold a contiguous block
    of rows (checked by :meth:`plan`).

    ``feature_specs`` maps a top-level feature name to a ``PartitionSpec`` whose first entry is
    ``batch_axes`` and whose other entries shard the feature's other dimensions, e.g.
    ``{"tokens": P("data", "seq")}`` for context parallelism. Loading groups stay defined by
    rows: a process loads whole rows and hands each of its devices only the columns it holds.

    Example:
      >>> from jax.sharding import Mesh, PartitionSpec
      >>> devices = np.array(jaxload.simulated_devices(2, 4)).reshape(4, 2)
      >>> mesh = Mesh(devices, ("data", "model"))
      >>> jaxload.Layout(mesh, "data").plan(global_batch_size=8).local_batch_size
      4
      >>> layout = jaxload.Layout(mesh, "data", {"tokens": PartitionSpec("data", "model")})
      >>> layout.plan(global_batch_size=8).device_columns[:2]
      ((0, 'tokens', 1, 0, 2), (1, 'tokens', 1, 1, 2))
    """

    mesh: Mesh
    batch_axes: tuple[str, ...]
    feature_specs: FeatureSpecs

    def __init__(self, mesh: Mesh, batch_axes: str | Sequence[str],
                 feature_specs: dict[str, PartitionSpec] | None = None):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
        axes = (batch_axes,) if isinstance(batch_axes, str) else tuple(batch_axes)
        unknown = [a for a in axes if a not in mesh.axis_names]
        if unknown or len(set(axes)) != len(axes):
            raise ValueError(
                f"batch_axes={axes!r} must be distinct axes of the mesh, whose axes are "
                f"{tuple(mesh.axis_names)!r}"
            )
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "batch_axes", axes)
        object.__setattr__(self, "feature_specs", _checked_specs(mesh, axes, feature_specs))

    @property
    def sharding(self) -> NamedSharding:
        """The ``NamedSharding`` of a batch leaf of any rank: dim 0 over ``batch_axes``."""
        return NamedSharding(self.mesh, PartitionSpec(self.batch_axes or None))

    def shardings(self, batch: Any) -> Any:
        """The ``NamedSharding`` of each leaf of a batch: its top-level feature's spec, or
        :attr:`sharding`.

        Example:
          >>> from jax.sharding import Mesh, PartitionSpec
          >>> mesh = Mesh(np.array(jaxload.simulated_devices(2, 4)).reshape(4, 2), ("data", "seq"))
          >>> layout = jaxload.Layout(mesh, "data", {"tokens": PartitionSpec("data", "seq")})
          >>> shardings = layout.shardings({"tokens": np.zeros((8, 16)), "label": np.zeros(8)})
          >>> shardings["tokens"].spec, shardings["label"].spec
          (P('data', 'seq'), P('data',))
        """
        treedef = jax.tree_util.tree_structure(batch)
        shardings = leaf_shardings(treedef, self.sharding, self.feature_specs)
        return jax.tree_util.tree_unflatten(treedef, shardings)

    @property
    def num_batch_shards(self) -> int:
        """How many distinct per-replica batches a global batch is cut into."""
        return math.prod(self.mesh.shape[a] for a in self.batch_axes)

    @property
    def process_count(self) -> int:
        return len({d.process_index for d in self.mesh.devices.flat})

    def plans(self, global_batch_size: int) -> tuple[Plan, ...]:
        """The plan of every process of the topology, indexed by process index."""
        return _plans(self, global_batch_size)

    def plan(self, global_batch_size: int, *, process_index: int | None = None) -> Plan:
        """The plan of one process (default: this process; process 0 on a simulated topology)."""
        plans = self.plans(global_batch_size)
        if process_index is None:
            simulated = isinstance(self.mesh.devices.flat[0], SimulatedDevice)
            process_index = 0 if simulated else jax.process_index()
        by_index = {p.process_index: p for p in plans}
        if process_index not in by_index:
            raise ValueError(
                f"process_index={process_index} has no device in this layout's mesh "
                f"(processes {sorted(by_index)})"
            )
        return by_index[process_index]


    def load_once_plan(self, global_batch_size: int, *, process_index: int | None = None) -> Plan:
        """The plan for loading each row once (the guide's Option 4), then resharding on device.

        With model replicas across processes, every process of a loading group loads the same
        rows. Instead, each process can load its own ``1/num_processes`` of the global batch (a
        plan in which every process is its own loading group, on the same devices) and the
        loader reaches :attr:`sharding` with one jitted reshard per step, which copies rows
        between the processes of each group over the devices' interconnect. Where every process
        is its own loading group already, this is just :meth:`plan`.

        Example:
          >>> devices = jaxload.simulated_devices(4, 2)
          >>> layout = jaxload.model_replicas_across_processes(2, devices=devices)
          >>> layout.plan(16).shard_count, layout.load_once_plan(16).shard_count
          (2, 4)
        """
        plan = self.plan(global_batch_size, process_index=process_index)
        processes = self.process_count
        if plan.shard_count == processes:
            return plan
        if not isinstance(global_batch_size, int) or global_batch_size % processes:
            raise ValueError(
                f"global_batch_size={global_batch_size!r} must be a multiple of the "
                f"{processes} processes to load each row once (load_once=True); e.g. "
                f"{max(global_batch_size // processes, 1) * processes}"
            )
        per_process = _by_process(_devices(list(self.mesh.devices.flat)))
        mesh = Mesh(np.array(per_process), ("process", "local"))
        # rows over every device where they divide evenly: fewer host-to-device bytes per step
        axes = ("process", "local") if global_batch_size % mesh.devices.size == 0 else "process"
        return Layout(mesh, axes).plan(global_batch_size, process_index=process_index)


@functools.lru_cache(maxsize=256)
def leaf_shardings(treedef, sharding: NamedSharding, feature_specs: tuple) -> tuple:
    """The sharding of each leaf of a batch structure: its top-level feature's spec (from
    ``feature_specs``, ``(name, PartitionSpec)`` pairs), or ``sharding``. Cached: it runs per
    step."""
    specs = dict(feature_specs)
    paths = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(treedef, [0] * treedef.num_leaves))[0]
    return tuple(sharding if specs.get(feature_name(path)) is None
                 else NamedSharding(sharding.mesh, specs[feature_name(path)]) for path, _ in paths)


def feature_name(path: tuple) -> str | None:
    """The top-level feature name of a leaf's pytree path (None outside a dict)."""
    key = path[0] if path else None
    return key.key if isinstance(key, jax.tree_util.DictKey) else None


def _spec_axes(entry: Any) -> tuple[str, ...]:
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def _entry(axes: tuple[str, ...]) -> Any:
    """A spec entry for ``axes``: None, one name, or a tuple of names."""
    return None if not axes else axes[0] if len(axes) == 1 else axes


def _checked_specs(mesh: Mesh, batch_axes: tuple[str, ...],
                   feature_specs: dict[str, PartitionSpec] | None) -> FeatureSpecs:
    """``feature_specs`` as sorted pairs, or a ValueError/TypeError naming the feature."""
    if feature_specs is None:
        return ()
    if not isinstance(feature_specs, dict):
        raise TypeError(f"feature_specs must be a dict of feature name -> PartitionSpec, got "
                        f"{type(feature_specs).__name__}")
    checked = []
    for name, spec in sorted(feature_specs.items(), key=lambda kv: str(kv[0])):
        where = f"feature_specs[{name!r}]"
        if not isinstance(name, str):
            raise TypeError(f"{where}: feature names must be str (top-level dict keys)")
        if not isinstance(spec, PartitionSpec):
            raise TypeError(f"{where} must be a jax.sharding.PartitionSpec, got {spec!r}")
        if not len(spec) or _spec_axes(spec[0]) != batch_axes:
            raise ValueError(
                f"{where}={spec} must start with the batch axes {batch_axes!r} (rows are "
                f"sharded as for every feature), e.g. PartitionSpec({_entry(batch_axes)!r}, ...)")
        used = [a for entry in spec for a in _spec_axes(entry)]
        unknown = sorted(set(used) - set(mesh.axis_names))
        if unknown or len(set(used)) != len(used):
            raise ValueError(f"{where}={spec} must use distinct axes of the mesh, whose axes are "
                             f"{tuple(mesh.axis_names)!r}")
        checked.append((name, spec))
    return tuple(checked)


def spec_shape_error(feature: str, spec: PartitionSpec, shape: tuple[int, ...],
                     mesh_shape: dict[str, int]) -> str | None:
    """Why ``spec`` cannot shard a feature whose rows have ``shape`` (None if it can)."""
    if len(spec) - 1 > len(shape):
        return (f"feature {feature} has shape {shape} per row (rank {len(shape)}), but its "
                f"spec {spec} shards {len(spec) - 1} dimensions after the batch dim")
    for dim, entry in enumerate(spec[1:], start=1):
        count = math.prod(mesh_shape[a] for a in _spec_axes(entry))
        if shape[dim - 1] % count:
            return (f"feature {feature} has shape {shape} per row; its spec {spec} splits dim "
                    f"{dim} (size {shape[dim - 1]}) into {count} blocks over {entry!r}, which "
                    f"does not divide it. Pad that dimension to a multiple of {count}.")
    return None


def _device_columns(layout: Layout, device_ids: list[int]) -> tuple[Column, ...]:
    """Which block of each sharded non-batch dim each device holds, for every feature spec."""
    columns = []
    for name, spec in layout.feature_specs:
        counts = [math.prod(layout.mesh.shape[a] for a in _spec_axes(e)) for e in spec]
        # a shape of one unit per block: each device's index start is its block number
        indices = NamedSharding(layout.mesh, spec).devices_indices_map(tuple(counts))
        for device, index in indices.items():
            if device.id in device_ids:
                columns += [(device.id, name, dim, index[dim].indices(counts[dim])[0], counts[dim])
                            for dim in range(1, len(spec)) if counts[dim] > 1]
    return tuple(sorted(columns))


def _devices(devices: Sequence[Device] | None) -> list[Device]:
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must not be empty")
    return sorted(devices, key=lambda d: (d.process_index, d.id))


def _by_process(devices: list[Device]) -> list[list[Device]]:
    """Devices grouped by process; every process must have the same number of devices."""
    groups: dict[int, list[Device]] = {}
    for d in devices:
        groups.setdefault(d.process_index, []).append(d)
    counts = {p: len(g) for p, g in groups.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"every process must have the same number of devices, got {counts}")
    return [groups[p] for p in sorted(groups)]


def data_parallel(*, devices: Sequence[Device] | None = None, mesh: Mesh | None = None) -> Layout:
    """Pure data parallelism: every device gets its own per-replica batch.

    On the user's mesh (``mesh=``, else the context mesh of ``with jax.set_mesh(mesh):``) the
    batch is sharded over all of its axes, with its axis names and types. Otherwise: a 1-D mesh
    ``("data",)`` over all devices (or ``devices``), process by process, with the axis type
    ``jax.make_mesh`` gives by default. Every process is its own loading group.

    Example:
      >>> layout = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4))
      >>> dict(layout.mesh.shape), layout.plan(global_batch_size=32).local_batch_size
      ({'data': 8}, 16)

      On this process's 8 devices, and on a mesh of your own:

      >>> dict(jaxload.data_parallel().mesh.shape)
      {'data': 8}
      >>> mesh = jax.make_mesh((4, 2), ("data", "model"))
      >>> jaxload.data_parallel(mesh=mesh).sharding.spec
      P(('data', 'model'),)
    """
    user = meshes.resolve(mesh, devices, "data_parallel()")
    if user is not None:
        return _fitted(Layout(user, tuple(user.axis_names)), "data_parallel()")
    return Layout(meshes.build(np.array(_devices(devices)), ("data",)), "data")


def model_replicas_in_process(model_size: int, *, devices: Sequence[Device] | None = None,
                              mesh: Mesh | None = None, model_axis: str | None = None) -> Layout:
    """Data + model parallelism with each model replica on ``model_size`` devices of one process.

    Mesh ``("replica", "model")`` of shape ``(num_devices // model_size, model_size)``; the batch
    is sharded over ``"replica"`` and replicated over ``"model"``. Each process is its own
    loading group and holds ``local_devices // model_size`` replicas. On the user's mesh
    (``mesh=`` or the context mesh) the model axis is ``model_axis`` (default: the mesh's last
    axis, of size ``model_size``), the batch is sharded over the other axes, and each replica's
    devices must be on one process.

    Example:
      >>> layout = jaxload.model_replicas_in_process(2, devices=jaxload.simulated_devices(2, 4))
      >>> dict(layout.mesh.shape), layout.plan(global_batch_size=8).device_rows
      ({'replica': 4, 'model': 2}, ((0, 0, 2), (1, 0, 2), (2, 2, 4), (3, 2, 4)))
    """
    _check_positive(model_size)
    what = f"model_replicas_in_process({model_size})"
    user = meshes.resolve(mesh, devices, what)
    if user is not None:
        axis = meshes.model_axis(user, model_size, model_axis, what)
        spanning = [sorted(p) for p in meshes.replica_processes(user, axis) if len(p) > 1]
        if spanning:
            raise ValueError(
                f"{what}: the mesh {dict(user.shape)} puts a model replica (along {axis!r}) on "
                f"processes {spanning[0]}, not on one process. Use "
                f"model_replicas_across_processes({model_size}), or a mesh whose {axis!r} axis "
                "runs over the devices of one process (jax.make_mesh orders devices process by "
                "process, so make the model axis the last one).")
        return _fitted(Layout(user, _other_axes(user, axis)), what)
    per_process = _by_process(_devices(devices))
    local = len(per_process[0])
    _check_model_size(model_size, local, "local devices per process")
    grid = np.array(per_process).reshape(-1, model_size)
    return Layout(meshes.build(grid, ("replica", "model")), "replica")


def model_replicas_across_processes(
    model_size: int, *, devices: Sequence[Device] | None = None, mesh: Mesh | None = None,
    model_axis: str | None = None,
) -> Layout:
    """Data + model parallelism with each model replica spread over ``model_size`` processes.

    As in the JAX guide: processes form ``num_processes // model_size`` loading groups of
    ``model_size`` processes each, process ``p`` in group ``p % (num_processes // model_size)``.
    Replica ``(g, d)`` is device ``d`` of every process of group ``g``, so all processes of a
    group load the same rows (with 4 processes x 2 devices and ``model_size=2``, processes 0 and
    2 load the same rows, and 1 and 3). On the user's mesh (``mesh=`` or the context mesh) the
    model axis is ``model_axis`` (default: the last axis, of size ``model_size``) and the batch
    is sharded over the other axes; the processes that share a replica form a loading group.

    Example:
      >>> devices = jaxload.simulated_devices(4, 2)
      >>> layout = jaxload.model_replicas_across_processes(2, devices=devices)
      >>> layout.plans(global_batch_size=8)[0].loading_groups
      ((0, 2), (1, 3))
    """
    _check_positive(model_size)
    what = f"model_replicas_across_processes({model_size})"
    user = meshes.resolve(mesh, devices, what)
    if user is not None:
        axis = meshes.model_axis(user, model_size, model_axis, what)
        if model_size > 1 and all(len(p) == 1 for p in meshes.replica_processes(user, axis)):
            raise ValueError(
                f"{what}: on the mesh {dict(user.shape)} every model replica (along {axis!r}) "
                f"is on one process. Use model_replicas_in_process({model_size}), whose "
                "processes each load their own rows.")
        return _fitted(Layout(user, _other_axes(user, axis)), what)
    per_process = _by_process(_devices(devices))
    num_processes = len(per_process)
    _check_model_size(model_size, num_processes, "processes")
    num_groups = num_processes // model_size
    replicas = [
        [per_process[g + k * num_groups][d] for k in range(model_size)]
        for g in range(num_groups)
        for d in range(len(per_process[0]))
    ]
    return Layout(meshes.build(np.array(replicas), ("replica", "model")), "replica")


def _other_axes(mesh: Mesh, axis: str) -> tuple[str, ...]:
    return tuple(a for a in mesh.axis_names if a != axis)


def _fitted(layout: Layout, what: str) -> Layout:
    """``layout`` if each process's devices hold whole rows of the batch, else a ValueError that
    names the mesh's axes and the fix."""
    try:
        layout.plans(layout.num_batch_shards)
    except ValueError as e:
        raise ValueError(
            f"{what} cannot use the mesh {dict(layout.mesh.shape)} with the batch over "
            f"{layout.batch_axes}: {e} Build the mesh with jax.make_mesh (which orders devices "
            "process by process), with the batch axes first.") from None
    return layout


def _check_positive(model_size: int) -> None:
    if not isinstance(model_size, int) or isinstance(model_size, bool) or model_size < 1:
        raise ValueError(f"model_size must be a positive int, got {model_size!r}")


def _check_model_size(model_size: int, available: int, what: str) -> None:
    _check_positive(model_size)
    if available % model_size:
        raise ValueError(
            f"model_size={model_size} does not divide the {available} {what}; "
            f"choose a divisor of {available}"
        )


@functools.lru_cache(maxsize=64)
def _plans(layout: Layout, global_batch_size: int) -> tuple[Plan, ...]:
    shards = layout.num_batch_shards
    if (
        not isinstance(global_batch_size, int)
        or isinstance(global_batch_size, bool)
        or global_batch_size < 1
        or global_batch_size % shards
    ):
        axes = ", ".join(f"{a}={layout.mesh.shape[a]}" for a in layout.batch_axes) or "none"
        below = global_batch_size // shards * shards if isinstance(global_batch_size, int) else 0
        nearest = sorted({max(below, shards), max(below, 0) + shards})
        raise ValueError(
            f"global_batch_size={global_batch_size!r} must be a positive multiple of the "
            f"{shards} batch shards (batch mesh axes: {axes}); e.g. "
            + " or ".join(map(str, nearest))
        )
    sharding = layout.sharding
    rows_of = {
        d: index[0].indices(global_batch_size)[:2]
        for d, index in sharding.devices_indices_map((global_batch_size,)).items()
    }
    block_of = {p: _process_block(p, [r for d, r in rows_of.items() if d.process_index == p])
                for p in sorted({d.process_index for d in rows_of})}
    groups = _loading_groups(block_of, global_batch_size)
    plans = []
    for p, (start, stop) in sorted(block_of.items()):
        shard_index = next(i for i, g in enumerate(groups) if p in g)
        local_devices = sorted((d for d in rows_of if d.process_index == p), key=lambda d: d.id)
        plans.append(
            Plan(
                global_batch_size=global_batch_size,
                process_index=p,
                shard_index=shard_index,
                shard_count=len(groups),
                local_batch_size=stop - start,
                num_batch_shards=shards,
                per_replica_batch_size=global_batch_size // shards,
                global_rows=(start, stop),
                device_rows=tuple(
                    (d.id, rows_of[d][0] - start, rows_of[d][1] - start) for d in local_devices
                ),
                loading_groups=groups,
                sharding=sharding,
                feature_specs=layout.feature_specs,
                device_columns=_device_columns(layout, [d.id for d in local_devices]),
            )
        )
    return tuple(plans)


def _process_block(process_index: int, rows: list[RowRange]) -> RowRange:
    """The one contiguous block of rows a process's devices need, or a ValueError."""
    blocks = sorted(set(rows))
    merged = [list(blocks[0])]
    for start, stop in blocks[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    if len(merged) > 1:
        spans = ", ".join(f"[{a}, {b})" for a, b in merged)
        raise ValueError(
            f"process {process_index}'s devices need rows {spans} of the global batch, which "
            "are not contiguous; a per-process pipeline can only feed one block. Order the mesh "
            "so that each process's devices hold adjacent batch shards."
        )
    return merged[0][0], merged[0][1]


def _loading_groups(block_of: dict[int, RowRange], global_batch_size: int) -> tuple[tuple[int, ...], ...]:
    """Processes grouped by the block they load; the blocks must tile the global batch evenly."""
    members: dict[RowRange, list[int]] = {}
    for p, block in block_of.items():
        members.setdefault(block, []).append(p)
    blocks = sorted(members)
    size = blocks[0][1] - blocks[0][0]
    expected = [(i * size, (i + 1) * size) for i in range(global_batch_size // size)]
    if blocks != expected:
        described = "; ".join(f"processes {members[b]} load rows [{b[0]}, {b[1]})" for b in blocks)
        raise ValueError(
            f"the processes' row blocks do not split the global batch of {global_batch_size} "
            f"rows into equal disjoint blocks: {described}"
        )
    return tuple(tuple(sorted(members[b])) for b in blocks)
