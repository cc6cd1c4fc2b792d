"""The loading plan: what one process loads for a global batch, and where each of its rows goes.

Everything here is index arithmetic over a batch sharding's mesh: the rows ``NamedSharding``
gives each device, merged into one block per process, and the processes that need the same
block grouped into a loading group.

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
from typing import TypeAlias

from jax.sharding import NamedSharding

from jaxload._src import plan_text
from jaxload._src.feature_specs import Column, FeatureSpecs, batch_axes, device_columns
from jaxload._src.topology import Device
from jaxload._src.validate import is_positive_int

RowRange: TypeAlias = tuple[int, int]  # [start, stop) rows of a batch


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
      schedule: under a batch-size schedule, its ``(first_step, global_batch_size)`` pairs
        (the plan is then step 0's, and :meth:`explain` lists every size); else ``()``.

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
    schedule: tuple[tuple[int, int], ...] = dataclasses.field(default=(), repr=False,
                                                              compare=False)

    def sharding_of(self, feature: str | None) -> NamedSharding:
        """The sharding of a top-level feature: its spec's, else the batch sharding."""
        spec = None if feature is None else dict(self.feature_specs).get(feature)
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
        return plan_text.text(self, every_plan(self), max_processes=max_processes)

    def __post_init__(self) -> None:
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


def every_plan(plan: Plan) -> tuple[Plan, ...]:
    """The plans of every process of ``plan``'s mesh for the same global batch, by process
    index."""
    return plans_for(plan.sharding, plan.feature_specs, plan.global_batch_size)


# typed: 8.0 and True must not find the plans cached for 8 and 1
@functools.lru_cache(maxsize=64, typed=True)
def plans_for(sharding: NamedSharding, feature_specs: FeatureSpecs, global_batch_size: int
              ) -> tuple[Plan, ...]:
    """The plan of every process with a device in ``sharding``'s mesh, by process index: rows
    over the batch ``sharding``, other dims of the features over their ``feature_specs``."""
    shards = math.prod(sharding.mesh.shape[a] for a in batch_axes(sharding))
    _check_global_batch_size(sharding, shards, global_batch_size)
    rows_of: dict[Device, RowRange] = {
        d: index[0].indices(global_batch_size)[:2]
        for d, index in sharding.devices_indices_map((global_batch_size,)).items()
    }
    block_of = {p: _process_block(p, [r for d, r in rows_of.items() if d.process_index == p])
                for p in sorted({d.process_index for d in rows_of})}
    groups = _loading_groups(block_of, global_batch_size)
    result = []
    for p, (start, stop) in sorted(block_of.items()):
        local_devices = sorted((d for d in rows_of if d.process_index == p), key=lambda d: d.id)
        result.append(Plan(
            global_batch_size=global_batch_size,
            process_index=p,
            shard_index=next(i for i, g in enumerate(groups) if p in g),
            shard_count=len(groups),
            local_batch_size=stop - start,
            num_batch_shards=shards,
            per_replica_batch_size=global_batch_size // shards,
            global_rows=(start, stop),
            device_rows=tuple(
                (d.id, rows_of[d][0] - start, rows_of[d][1] - start) for d in local_devices),
            loading_groups=groups,
            sharding=sharding,
            feature_specs=feature_specs,
            device_columns=device_columns(sharding.mesh, feature_specs,
                                          [d.id for d in local_devices]),
        ))
    return tuple(result)


def _check_global_batch_size(sharding: NamedSharding, shards: int, global_batch_size: object
                             ) -> None:
    """A ValueError unless ``global_batch_size`` is a positive multiple of ``shards``, naming
    the batch mesh axes and the nearest sizes that fit."""
    if is_positive_int(global_batch_size) and global_batch_size % shards == 0:
        return
    mesh_shape = sharding.mesh.shape
    axes = ", ".join(f"{a}={mesh_shape[a]}" for a in batch_axes(sharding)) or "none"
    below = global_batch_size // shards * shards if isinstance(global_batch_size, int) else 0
    nearest = sorted({max(below, shards), max(below, 0) + shards})
    raise ValueError(
        f"global_batch_size={global_batch_size!r} must be a positive multiple of the "
        f"{shards} batch shards (batch mesh axes: {axes}); e.g. "
        + " or ".join(map(str, nearest))
    )


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


def _loading_groups(block_of: dict[int, RowRange], global_batch_size: int
                    ) -> tuple[tuple[int, ...], ...]:
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
