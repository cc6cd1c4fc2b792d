"""Pictures of a plan: which process loads which rows, and which device holds which rows.

:func:`text` renders tables with ``rich`` (the ``cli`` extra); :func:`svg` draws the JAX guide's
kind of figure with the standard library's ``xml.etree``. Both work on simulated topologies, so
``jaxload plan`` can show a 512-process job without starting one.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import numpy as np

from jaxload._src.layouts import Layout, Plan

# One colour per loading group, cycling; chosen to stay distinguishable side by side.
_COLOURS = ["#f4a6c1", "#f9d56e", "#9ed39a", "#8ec5f0", "#c9a7eb", "#f6b47f", "#7fd6cf", "#d9d9d9"]


def layout_of(plan: Plan) -> Layout:
    """The layout a plan was made from (its sharding's mesh and batch axes)."""
    axes = plan.sharding.spec[0] if len(plan.sharding.spec) else None
    axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
    return Layout(plan.sharding.mesh, axes, dict(plan.feature_specs) or None)


def _rows(start: int, stop: int) -> str:
    return f"{start}-{stop - 1}"


def _device_table(layout: Layout, plans: tuple[Plan, ...], max_processes: int):
    """Per device: process, device id, mesh position, global rows, per-replica batch index,
    and the columns it holds of each feature with a spec."""
    mesh = layout.mesh
    position = {d.id: tuple(int(i) for i in index) for index, d in np.ndenumerate(mesh.devices)}
    rows = []
    for plan in plans[:max_processes]:
        base = plan.global_rows[0]
        for device, start, stop in plan.device_rows:
            rows.append((plan.process_index, device, position[device], base + start, base + stop,
                         (base + start) // plan.per_replica_batch_size,
                         columns_text(plan, device)))
    return rows


def columns_text(plan: Plan, device: int) -> str:
    """What a device holds of the features' other dims: ``tokens dim1 0/2`` is block 0 of 2."""
    return ", ".join(f"{feature} dim{dim} {block}/{blocks}"
                     for d, feature, dim, block, blocks in plan.device_columns if d == device)


def _same_rows_sentence(plans: tuple[Plan, ...]) -> str:
    shared = [g for g in plans[0].loading_groups if len(g) > 1]
    if not shared:
        return "Every process loads different rows (each is its own loading group)."
    parts = []
    for g in shared[:8]:
        names = ", ".join(map(str, g[:-1])) + f" and {g[-1]}"
        parts.append(f"processes {names} load the same rows")
    more = f" (and {len(shared) - 8} more groups)" if len(shared) > 8 else ""
    return "; ".join(parts).capitalize() + more + "."


def text(plan: Plan, *, max_processes: int = 16, width: int = 100) -> str:
    """Tables of the loading groups and of what each device holds, as plain text."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError as e:  # pragma: no cover - rich ships with the cli and all extras
        raise ImportError("Plan.explain() needs rich: pip install 'jaxload[cli]'") from e
    layout = layout_of(plan)
    plans = layout.plans(plan.global_batch_size)
    mesh_text = " x ".join(f"{a}={n}" for a, n in layout.mesh.shape.items())
    local = len(plans[0].device_rows)
    out = io.StringIO()
    width = width + 20 if plan.feature_specs else width
    console = Console(file=out, width=width, color_system=None, legacy_windows=False)
    console.print(
        f"{len(plans)} processes x {local} devices, mesh {mesh_text}, batch over "
        f"{layout.batch_axes or 'no axis (replicated)'}\n"
        f"global batch {plan.global_batch_size} rows = {plan.num_batch_shards} per-replica "
        f"batches of {plan.per_replica_batch_size}; {plan.shard_count} loading groups of "
        f"{plan.local_batch_size} rows each", highlight=False)

    groups = Table(title="Loading groups")
    for column in ("group (shard_index)", "processes", "global rows"):
        groups.add_column(column)
    for index, members in enumerate(plan.loading_groups):
        start, stop = plans[members[0]].global_rows
        groups.add_row(str(index), ", ".join(map(str, members)), _rows(start, stop))
    console.print(groups)
    console.print(_same_rows_sentence(plans) + " Shard the pipeline by group (shard_index), "
                  "not by process.", highlight=False)

    devices = Table(title="Devices")
    columns = ["process", "device", "mesh position", "global rows", "per-replica batch"]
    for column in columns + (["columns"] if plan.feature_specs else []):
        devices.add_column(column)
    for process, device, pos, start, stop, replica, cols in _device_table(layout, plans,
                                                                          max_processes):
        cells = [str(process), str(device), str(pos), _rows(start, stop), str(replica)]
        devices.add_row(*cells, *([cols] if plan.feature_specs else []))
    console.print(devices)
    for name, spec in plan.feature_specs:
        console.print(f"feature {name!r}: {spec}; columns 'dimD b/n': block b of n equal blocks "
                      "of its dim D", highlight=False)
    if len(plans) > max_processes:
        console.print(f"... and {len(plans) - max_processes} more processes", highlight=False)
    return out.getvalue()


def svg(plan: Plan, *, max_processes: int = 32) -> str:
    """An SVG in the guide's style: the global batch's row blocks coloured by loading group on
    the left, each process's devices on the right, each device coloured like the rows it holds
    and labelled ``d<device> r<per-replica batch>: <rows>`` (devices of one model replica share
    the ``r``). One ``<rect class="device">`` per device."""
    layout = layout_of(plan)
    plans = layout.plans(plan.global_batch_size)[:max_processes]
    group_of = {p.process_index: p.shard_index for p in plans}
    blocks = plan.num_batch_shards
    cell, gap, left = 28, 12, 170
    local = len(plans[0].device_rows)
    grids = _column_grids(plans, blocks)
    grids_height = sum((blocks + 2) * cell for _ in grids)
    height = max(blocks * cell, len(plans) * (cell + gap)) + 60 + grids_height
    width = max([left + 90 + local * (cell * 4 + 6) + 20] + [20 + g[2] * 114 for g in grids])
    root = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width=str(width),
                      height=str(height), viewBox=f"0 0 {width} {height}")
    ET.SubElement(root, "text", x="10", y="20", attrib={"font-size": "13"}).text = (
        f"global batch {plan.global_batch_size}: {blocks} per-replica batches, "
        f"{plan.shard_count} loading groups")
    rows_per_block = plan.per_replica_batch_size
    for b in range(blocks):  # the global batch, one box per per-replica batch
        start = b * rows_per_block
        group = start // plan.local_batch_size
        y = 40 + b * cell
        ET.SubElement(root, "rect", x="10", y=str(y), width="120", height=str(cell - 2),
                      fill=_COLOURS[group % len(_COLOURS)], stroke="#333",
                      attrib={"class": "rows", "data-group": str(group)})
        ET.SubElement(root, "text", x="16", y=str(y + cell / 2 + 4),
                      attrib={"font-size": "11"}).text = (
            f"rows {_rows(start, start + rows_per_block)} (g{group})")
    for i, p in enumerate(plans):  # processes, each a row of its devices
        y = 40 + i * (cell + gap)
        ET.SubElement(root, "rect", x=str(left), y=str(y - 4), width=str(width - left - 10),
                      height=str(cell + 6), fill="none", stroke="#999",
                      attrib={"class": "process", "data-process": str(p.process_index)})
        ET.SubElement(root, "text", x=str(left + 6), y=str(y + cell / 2 + 2),
                      attrib={"font-size": "11"}).text = f"process {p.process_index}"
        for j, (device, start, stop) in enumerate(p.device_rows):
            a, b = p.global_rows[0] + start, p.global_rows[0] + stop
            x = left + 80 + j * (cell * 4 + 6)
            ET.SubElement(root, "rect", x=str(x), y=str(y), width=str(cell * 4),
                          height=str(cell - 2), fill=_COLOURS[group_of[p.process_index] % len(_COLOURS)],
                          stroke="#333", attrib={"class": "device", "data-device": str(device),
                                                 "data-rows": _rows(a, b)})
            held = "".join(f" c{blk}/{n}" for d, _, _, blk, n in p.device_columns
                           if d == device)[:8]
            ET.SubElement(root, "text", x=str(x + 4), y=str(y + cell / 2 + 3),
                          attrib={"font-size": "10"}).text = (
                f"d{device} r{a // rows_per_block}: {_rows(a, b)}{held}")
    top = max(blocks * cell, len(plans) * (cell + gap)) + 60
    for name, dim, count, holders in grids:
        top = _draw_grid(root, top, cell, name, dim, count, holders, plan)
    return ET.tostring(root, encoding="unicode")


def _column_grids(plans: tuple[Plan, ...], blocks: int) -> list:
    """Per feature with a sharded non-batch dim (its first such dim): the devices holding each
    (per-replica batch, column block) cell."""
    grids: dict[tuple[str, int], dict] = {}
    for p in plans:
        rows = {d: (p.global_rows[0] + a) // p.per_replica_batch_size for d, a, _ in p.device_rows}
        for device, name, dim, block, count in p.device_columns:
            grid = grids.setdefault((name, dim), {"count": count, "cells": {}})
            grid["cells"].setdefault((rows[device], block), []).append(device)
    first = {}
    for (name, dim), grid in sorted(grids.items()):
        first.setdefault(name, (name, dim, grid["count"], grid["cells"]))
    return list(first.values())


def _draw_grid(root, top: int, cell: int, name: str, dim: int, count: int, holders: dict,
               plan: Plan) -> int:
    """One feature's global batch as a grid: per-replica batches down, column blocks across,
    each cell coloured by the loading group of its rows and labelled with its devices."""
    ET.SubElement(root, "text", x="10", y=str(top + 14), attrib={"font-size": "13"}).text = (
        f"feature {name!r}: per-replica batches (down) x blocks of dim {dim} (across)")
    width = 110
    for (row, block), devices in sorted(holders.items()):
        x, y = 10 + block * (width + 4), top + cell + row * cell
        group = row * plan.per_replica_batch_size // plan.local_batch_size
        ET.SubElement(root, "rect", x=str(x), y=str(y), width=str(width), height=str(cell - 2),
                      fill=_COLOURS[group % len(_COLOURS)], stroke="#333",
                      attrib={"class": "cell", "data-feature": name, "data-replica": str(row),
                              "data-block": f"{block}/{count}",
                              "data-devices": ",".join(map(str, sorted(devices)))})
        ET.SubElement(root, "text", x=str(x + 4), y=str(y + cell / 2 + 3),
                      attrib={"font-size": "10"}).text = (
            f"r{row} c{block}: d{','.join(map(str, sorted(devices)))}")
    return top + (len({r for r, _ in holders}) + 2) * cell
