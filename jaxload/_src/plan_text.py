"""A plan as plain-text tables: which process loads which rows, which device holds which rows.

Rendered with ``rich`` (the ``cli`` extra), from one process's plan and the plans of every
process, which the caller computes: :meth:`jaxload.Plan.explain` and :func:`explain.text`.
The tables read a plan through :class:`PlanView`, what they show of it, so that ``plan.py``
(whose :meth:`~jaxload.Plan.explain` renders them) is the only one of the two to import the other.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Protocol

import numpy as np
from jax.sharding import Mesh, NamedSharding

from jaxload._src.feature_specs import Column, FeatureSpecs, batch_axes

if TYPE_CHECKING:
    from rich.console import Console

# process, device, mesh position, first and last global row, per-replica batch, columns held
_DeviceRow = tuple[int, int, tuple[int, ...], int, int, int, str]


class PlanView(Protocol):
    """What the tables show of a plan: :class:`~jaxload.Plan` has each of these attributes,
    documented there."""

    @property
    def global_batch_size(self) -> int: ...
    @property
    def process_index(self) -> int: ...
    @property
    def shard_count(self) -> int: ...
    @property
    def local_batch_size(self) -> int: ...
    @property
    def num_batch_shards(self) -> int: ...
    @property
    def per_replica_batch_size(self) -> int: ...
    @property
    def global_rows(self) -> tuple[int, int]: ...
    @property
    def device_rows(self) -> tuple[tuple[int, int, int], ...]: ...
    @property
    def loading_groups(self) -> tuple[tuple[int, ...], ...]: ...
    @property
    def sharding(self) -> NamedSharding: ...
    @property
    def feature_specs(self) -> FeatureSpecs: ...
    @property
    def device_columns(self) -> tuple[Column, ...]: ...
    @property
    def schedule(self) -> tuple[tuple[int, int], ...]: ...


def rows_text(start: int, stop: int) -> str:
    """``[start, stop)`` as the first and last row: ``0-7``."""
    return f"{start}-{stop - 1}"


def columns_text(plan: PlanView, device: int) -> str:
    """What a device holds of the features' other dims: ``tokens dim1 0/2`` is block 0 of 2."""
    return ", ".join(f"{feature} dim{dim} {block}/{blocks}"
                     for d, feature, dim, block, blocks in plan.device_columns if d == device)


def text(plan: PlanView, plans: tuple[PlanView, ...], *, max_processes: int = 16, width: int = 100
         ) -> str:
    """Tables of the loading groups and of what each device holds, as plain text; ``plans`` are
    the plans of every process, by process index."""
    try:
        from rich.console import Console
    except ImportError as e:  # pragma: no cover - rich ships with the cli and all extras
        raise ImportError("Plan.explain() needs rich: pip install 'jaxload[cli]'") from e
    out = io.StringIO()
    width = width + 20 if plan.feature_specs else width
    console = Console(file=out, width=width, color_system=None, legacy_windows=False)
    mesh_text = " x ".join(f"{a}={n}" for a, n in plan.sharding.mesh.shape.items())
    console.print(
        f"{len(plans)} processes x {len(plans[0].device_rows)} devices, mesh {mesh_text}, "
        f"batch over {batch_axes(plan.sharding) or 'no axis (replicated)'}\n"
        f"global batch {plan.global_batch_size} rows = {plan.num_batch_shards} per-replica "
        f"batches of {plan.per_replica_batch_size}; {plan.shard_count} loading groups of "
        f"{plan.local_batch_size} rows each", highlight=False)
    if plan.schedule:
        _print_schedule(console, plan)
    _print_groups(console, plan, plans)
    _print_devices(console, plan, plans, max_processes)
    for name, spec in plan.feature_specs:
        console.print(f"feature {name!r}: {spec}; columns 'dimD b/n': block b of n equal blocks "
                      "of its dim D", highlight=False)
    if len(plans) > max_processes:
        console.print(f"... and {len(plans) - max_processes} more processes", highlight=False)
    return out.getvalue()


def _print_schedule(console: Console, plan: PlanView) -> None:
    """The sizes of a batch-size schedule; the tables after it are for step 0's size."""
    from rich.table import Table

    table = Table(title="Batch-size schedule")
    for column in ("from step", "global batch", "per-replica batch", "rows per loading group"):
        table.add_column(column)
    shards, groups = plan.num_batch_shards, plan.shard_count
    for step, size in plan.schedule:
        placed = -(-size // shards) * shards  # remainder="pad": rounded up to the batch shards
        padding = f" + {(placed - size) // groups} padding" if placed != size else ""
        table.add_row(str(step), f"{size}" + (f" (placed as {placed})" if padding else ""),
                      str(placed // shards), f"{size // groups}{padding}")
    console.print(table)
    console.print("Every size has the same loading groups; rows are consumed in order across "
                  "the sizes.\nThe tables below are for step 0's size.", highlight=False)


def _print_groups(console: Console, plan: PlanView, plans: tuple[PlanView, ...]) -> None:
    """The table of loading groups, and which processes load the same rows."""
    from rich.table import Table

    groups = Table(title="Loading groups")
    for column in ("group (shard_index)", "processes", "global rows"):
        groups.add_column(column)
    for index, members in enumerate(plan.loading_groups):
        start, stop = plans[members[0]].global_rows
        groups.add_row(str(index), ", ".join(map(str, members)), rows_text(start, stop))
    console.print(groups)
    console.print(_same_rows_sentence(plans) + " Shard the pipeline by group (shard_index), "
                  "not by process.", highlight=False)


def _print_devices(console: Console, plan: PlanView, plans: tuple[PlanView, ...],
                   max_processes: int) -> None:
    """The table of devices of the first ``max_processes`` processes."""
    from rich.table import Table

    devices = Table(title="Devices")
    columns = ["process", "device", "mesh position", "global rows", "per-replica batch"]
    for column in columns + (["columns"] if plan.feature_specs else []):
        devices.add_column(column)
    for process, device, pos, start, stop, replica, cols in _device_rows(plans[:max_processes]):
        cells = [str(process), str(device), str(pos), rows_text(start, stop), str(replica)]
        devices.add_row(*cells, *([cols] if plan.feature_specs else []))
    console.print(devices)


def _device_rows(plans: tuple[PlanView, ...]) -> list[_DeviceRow]:
    """Per device: process, device id, mesh position, global rows, per-replica batch index,
    and the columns it holds of each feature with a spec."""
    mesh = plans[0].sharding.mesh
    if not isinstance(mesh, Mesh):  # plans are made on concrete meshes, whose devices they place
        raise TypeError(f"a plan's sharding must be on a jax.sharding.Mesh, got {mesh!r}")
    position = {d.id: tuple(int(i) for i in index) for index, d in np.ndenumerate(mesh.devices)}
    rows = []
    for plan in plans:
        base = plan.global_rows[0]
        for device, start, stop in plan.device_rows:
            rows.append((plan.process_index, device, position[device], base + start, base + stop,
                         (base + start) // plan.per_replica_batch_size,
                         columns_text(plan, device)))
    return rows


def _same_rows_sentence(plans: tuple[PlanView, ...]) -> str:
    shared = [g for g in plans[0].loading_groups if len(g) > 1]
    if not shared:
        return "Every process loads different rows (each is its own loading group)."
    parts = []
    for g in shared[:8]:
        names = ", ".join(map(str, g[:-1])) + f" and {g[-1]}"
        parts.append(f"processes {names} load the same rows")
    more = f" (and {len(shared) - 8} more groups)" if len(shared) > 8 else ""
    return "; ".join(parts).capitalize() + more + "."
