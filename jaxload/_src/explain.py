"""Pictures of a plan: which process loads which rows, and which device holds which rows.

:func:`text` renders tables with ``rich`` (the ``cli`` extra); :func:`svg` draws the JAX guide's
kind of figure with the standard library's ``xml.etree``. Both take one process's plan and work
on simulated topologies, so ``jaxload plan`` can show a 512-process job without starting one.

Example:
  >>> plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4)).plan(16)
  >>> print(text(plan).splitlines()[0])
  2 processes x 4 devices, mesh data=8, batch over ('data',)
  >>> svg(plan).count('class="device"')
  8
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TypeAlias

from jaxload._src import plan_text
from jaxload._src.plan import Plan, every_plan
from jaxload._src.plan_text import rows_text
from jaxload._src.validate import is_positive_int

# One colour per loading group, cycling; chosen to stay distinguishable side by side.
_COLOURS = ["#f4a6c1", "#f9d56e", "#9ed39a", "#8ec5f0", "#c9a7eb", "#f6b47f", "#7fd6cf", "#d9d9d9"]


def text(plan: Plan, *, max_processes: int = 16, width: int = 100) -> str:
    """Tables of the loading groups and of what each device holds, as plain text (the text of
    :meth:`jaxload.Plan.explain`)."""
    return plan_text.text(plan, every_plan(plan), max_processes=max_processes, width=width)


def files_text(plan: Plan, files: int) -> str:
    """What each process reads of a tf.data pipeline over ``files`` files
    (``from_tf_data(shard="auto")``).

    Example:
      >>> plan = jaxload.data_parallel(devices=jaxload.simulated_devices(4, 2)).plan(16)
      >>> files_text(plan, 10)
      'tf.data by files: each loading group reads 2-3 of the 10 files (1/4 of the records)'
      >>> print(*files_text(plan, 2).split(": ", 1), sep=":\\n")
      tf.data by elements (2 files for 4 loading groups; write at least 4):
      each process reads every element and keeps 1/4 of them
    """
    from jaxload._src.pipelines.tf.decide import ELEMENTS, FILES
    from jaxload._src.pipelines.tf.split import Sharding

    if not is_positive_int(files):
        raise ValueError(f"--files={files!r} must be a positive int")
    k = plan.shard_count
    if files >= k or k == 1:
        return f"tf.data by files: {Sharding(FILES, files=files if k > 1 else None).reads(plan)}"
    return (f"tf.data by elements ({files} file{'s' * (files != 1)} for {k} loading groups; "
            f"write at least {k}): "
            f"{Sharding(ELEMENTS).reads(plan)}")


# (per-replica batch, column block) -> the devices holding that cell of a feature
_Cells: TypeAlias = dict[tuple[int, int], list[int]]
# one feature's grid: feature, its sharded dim, blocks of that dim, cells
_Grid: TypeAlias = tuple[str, int, int, _Cells]


def svg(plan: Plan, *, max_processes: int = 32) -> str:
    """An SVG in the guide's style: the global batch's row blocks coloured by loading group on
    the left, each process's devices on the right, each device coloured like the rows it holds
    and labelled ``d<device> r<per-replica batch>: <rows>`` (devices of one model replica share
    the ``r``). One ``<rect class="device">`` per device."""
    plans = every_plan(plan)[:max_processes]
    blocks, cell, gap, left = plan.num_batch_shards, 28, 12, 170
    grids = _column_grids(plans)
    top = max(blocks * cell, len(plans) * (cell + gap)) + 60  # where the feature grids start
    height = top + sum((blocks + 2) * cell for _ in grids)
    local = len(plans[0].device_rows)
    width = max([left + 90 + local * (cell * 4 + 6) + 20] + [20 + g[2] * 114 for g in grids])
    root = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width=str(width),
                      height=str(height), viewBox=f"0 0 {width} {height}")
    ET.SubElement(root, "text", x="10", y="20", attrib={"font-size": "13"}).text = (
        f"global batch {plan.global_batch_size}: {blocks} per-replica batches, "
        f"{plan.shard_count} loading groups")
    _draw_batch(root, plan, cell)
    for i, p in enumerate(plans):  # processes, each a row of its devices
        _draw_process(root, p, 40 + i * (cell + gap), cell, left, width)
    for name, dim, count, holders in grids:
        top = _draw_grid(root, top, cell, name, dim, count, holders, plan)
    return ET.tostring(root, encoding="unicode")


def _draw_batch(root: ET.Element, plan: Plan, cell: int) -> None:
    """The global batch, one box per per-replica batch, coloured by loading group."""
    rows_per_block = plan.per_replica_batch_size
    for b in range(plan.num_batch_shards):
        start = b * rows_per_block
        group = start // plan.local_batch_size
        y = 40 + b * cell
        ET.SubElement(root, "rect", x="10", y=str(y), width="120", height=str(cell - 2),
                      fill=_COLOURS[group % len(_COLOURS)], stroke="#333",
                      attrib={"class": "rows", "data-group": str(group)})
        ET.SubElement(root, "text", x="16", y=str(y + cell / 2 + 4),
                      attrib={"font-size": "11"}).text = (
            f"rows {rows_text(start, start + rows_per_block)} (g{group})")


def _draw_process(root: ET.Element, p: Plan, y: int, cell: int, left: int, width: int) -> None:
    """One process as a row of its devices, each coloured by the process's loading group."""
    ET.SubElement(root, "rect", x=str(left), y=str(y - 4), width=str(width - left - 10),
                  height=str(cell + 6), fill="none", stroke="#999",
                  attrib={"class": "process", "data-process": str(p.process_index)})
    ET.SubElement(root, "text", x=str(left + 6), y=str(y + cell / 2 + 2),
                  attrib={"font-size": "11"}).text = f"process {p.process_index}"
    for j, (device, start, stop) in enumerate(p.device_rows):
        a, b = p.global_rows[0] + start, p.global_rows[0] + stop
        x = left + 80 + j * (cell * 4 + 6)
        ET.SubElement(root, "rect", x=str(x), y=str(y), width=str(cell * 4),
                      height=str(cell - 2), fill=_COLOURS[p.shard_index % len(_COLOURS)],
                      stroke="#333", attrib={"class": "device", "data-device": str(device),
                                             "data-rows": rows_text(a, b)})
        held = "".join(f" c{blk}/{n}" for d, _, _, blk, n in p.device_columns
                       if d == device)[:8]
        ET.SubElement(root, "text", x=str(x + 4), y=str(y + cell / 2 + 3),
                      attrib={"font-size": "10"}).text = (
            f"d{device} r{a // p.per_replica_batch_size}: {rows_text(a, b)}{held}")


def _column_grids(plans: tuple[Plan, ...]) -> list[_Grid]:
    """Per feature with a sharded non-batch dim (its first such dim): the devices holding each
    (per-replica batch, column block) cell."""
    counts: dict[tuple[str, int], int] = {}
    cells: dict[tuple[str, int], _Cells] = {}
    for p in plans:
        rows = {d: (p.global_rows[0] + a) // p.per_replica_batch_size for d, a, _ in p.device_rows}
        for device, name, dim, block, count in p.device_columns:
            counts.setdefault((name, dim), count)
            cells.setdefault((name, dim), {}).setdefault((rows[device], block), []).append(device)
    first: dict[str, _Grid] = {}
    for name, dim in sorted(cells):
        first.setdefault(name, (name, dim, counts[name, dim], cells[name, dim]))
    return list(first.values())


def _draw_grid(root: ET.Element, top: int, cell: int, name: str, dim: int, count: int,
               holders: _Cells, plan: Plan) -> int:
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
