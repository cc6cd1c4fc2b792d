"""Layouts: a mesh plus the mesh axes that shard the batch, and the three layouts of the JAX
guide built on the user's mesh or on one of their own.

A layout implies a loading plan per process (:class:`~jaxload.Plan`, :mod:`plan`); both are
index arithmetic over a topology, so they run the same on real devices and on a simulated one
(:func:`~jaxload.simulated_devices`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, cast

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxload._src import meshes
from jaxload._src import schedule as schedules
from jaxload._src.feature_specs import FeatureSpecs, checked_specs, leaf_shardings
from jaxload._src.plan import Plan, plans_for
from jaxload._src.topology import Device, SimulatedDevice, by_process, ordered, simulated_devices
from jaxload._src.trees import PyTree
from jaxload._src.validate import positive_int

# the layout names, with the plan and topology names they are used with
__all__ = ["Layout", "Plan", "SimulatedDevice", "data_parallel", "model_replicas_across_processes",
           "model_replicas_in_process", "simulated_devices"]


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
        object.__setattr__(self, "feature_specs", checked_specs(mesh, axes, feature_specs))

    @property
    def sharding(self) -> NamedSharding:
        """The ``NamedSharding`` of a batch leaf of any rank: dim 0 over ``batch_axes``."""
        return NamedSharding(self.mesh, PartitionSpec(self.batch_axes or None))

    def shardings(self, batch: PyTree[Any]) -> PyTree[NamedSharding]:
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
        tree: PyTree[NamedSharding] = jax.tree_util.tree_unflatten(treedef, shardings)
        return tree

    @property
    def num_batch_shards(self) -> int:
        """How many distinct per-replica batches a global batch is cut into."""
        return math.prod(self.mesh.shape[a] for a in self.batch_axes)

    @property
    def process_count(self) -> int:
        """How many processes have devices in the mesh."""
        return len({d.process_index for d in self.mesh.devices.flat})

    def plans(self, global_batch_size: int) -> tuple[Plan, ...]:
        """The plan of every process of the topology, indexed by process index."""
        return plans_for(self.sharding, self.feature_specs, global_batch_size)

    def plan(self, global_batch_size: int | Sequence[tuple[int, int]], *,
             process_index: int | None = None) -> Plan:
        """The plan of one process (default: this process; process 0 on a simulated topology).

        ``global_batch_size`` may be a batch-size schedule, ``[(first_step, size), ...]``: every
        size is checked, and the plan is step 0's, carrying the schedule (``plan.schedule``,
        shown by :meth:`Plan.explain`)."""
        pairs = schedules.parse(global_batch_size)
        if pairs is not None:
            return schedules.Schedule.build(
                pairs, lambda size: self.plan(size, process_index=process_index)).plan
        if process_index is None:
            simulated = isinstance(self.mesh.devices.flat[0], SimulatedDevice)
            process_index = 0 if simulated else jax.process_index()
        by_index = {p.process_index: p for p in self.plans(cast(int, global_batch_size))}
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
        if global_batch_size % processes:  # a positive int: plan() took it
            raise ValueError(
                f"global_batch_size={global_batch_size!r} must be a multiple of the "
                f"{processes} processes to load each row once (load_once=True); e.g. "
                f"{max(global_batch_size // processes, 1) * processes}"
            )
        per_process = by_process(ordered(list(self.mesh.devices.flat)))
        mesh = Mesh(np.array(per_process), ("process", "local"))
        # rows over every device where they divide evenly: fewer host-to-device bytes per step
        axes = ("process", "local") if global_batch_size % mesh.devices.size == 0 else "process"
        return Layout(mesh, axes).plan(global_batch_size, process_index=process_index)


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
    return Layout(meshes.build(np.array(ordered(devices)), ("data",)), "data")


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
    positive_int("model_size", model_size)
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
        return _fitted(Layout(user, meshes.other_axes(user, axis)), what)
    per_process = by_process(ordered(devices))
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
    positive_int("model_size", model_size)
    what = f"model_replicas_across_processes({model_size})"
    user = meshes.resolve(mesh, devices, what)
    if user is not None:
        axis = meshes.model_axis(user, model_size, model_axis, what)
        if model_size > 1 and all(len(p) == 1 for p in meshes.replica_processes(user, axis)):
            raise ValueError(
                f"{what}: on the mesh {dict(user.shape)} every model replica (along {axis!r}) "
                f"is on one process. Use model_replicas_in_process({model_size}), whose "
                "processes each load their own rows.")
        return _fitted(Layout(user, meshes.other_axes(user, axis)), what)
    per_process = by_process(ordered(devices))
    num_processes = len(per_process)
    _check_model_size(model_size, num_processes, "processes")
    num_groups = num_processes // model_size
    replicas = [
        [per_process[g + k * num_groups][d] for k in range(model_size)]
        for g in range(num_groups)
        for d in range(len(per_process[0]))
    ]
    return Layout(meshes.build(np.array(replicas), ("replica", "model")), "replica")


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


def _check_model_size(model_size: int, available: int, what: str) -> None:
    if available % model_size:
        raise ValueError(
            f"model_size={model_size} does not divide the {available} {what}; "
            f"choose a divisor of {available}"
        )
