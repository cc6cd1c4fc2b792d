"""Which mesh the convenience layouts build on: the user's, or one built as ``jax.make_mesh`` would.

JAX code today builds its mesh with ``jax.make_mesh`` (``Explicit`` axes by default since JAX
0.9) and puts it in context with ``with jax.set_mesh(mesh):``. Batches must live on that very
mesh, with its axis names and types: a batch on another mesh looks unsharded to
``jax.shard_map(..., in_specs=P("data"))`` and cannot meet parameters placed on the user's mesh
in one ``dot_general``. So :func:`jaxload.data_parallel` and the model-replica layouts take
``mesh=``, else use the context mesh, else build one with the installed JAX's default axis types.
The context is thread-local: it is read here, on the thread that builds the layout, never on the
loader's prefetch thread.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh


def context_mesh() -> Mesh | None:
    """The concrete mesh of ``with jax.set_mesh(mesh):`` (or ``with mesh:``) on this thread, if
    any."""
    get_mesh = getattr(jax.sharding, "get_mesh", None)
    mesh = get_mesh() if get_mesh is not None else None
    if isinstance(mesh, Mesh) and mesh.axis_names:
        return mesh
    from jaxload._src import compat

    physical = compat.thread_mesh()  # `with mesh:` (the older context), where supported
    return physical if isinstance(physical, Mesh) and physical.axis_names else None


@functools.cache
def _default_axis_type() -> Any:
    """The axis type ``jax.make_mesh`` gives by default in the installed JAX."""
    axis_type = getattr(jax.sharding, "AxisType", None)
    if axis_type is None:
        return None
    try:
        return jax.make_mesh((1,), ("x",), devices=jax.local_devices()[:1]).axis_types[0]
    except Exception:  # noqa: BLE001 - no backend (simulated devices only): JAX >= 0.9's default
        return axis_type.Explicit


def build(devices: np.ndarray, axis_names: tuple[str, ...]) -> Mesh:
    """A mesh over ``devices`` (in jaxload's order: process by process) with the axis types
    ``jax.make_mesh`` gives by default."""
    axis_type = _default_axis_type()
    if axis_type is None:
        return Mesh(devices, axis_names)
    return Mesh(devices, axis_names, axis_types=(axis_type,) * len(axis_names))


def resolve(mesh: Mesh | None, devices: Sequence[Any] | None, layout: str) -> Mesh | None:
    """The user's mesh for ``layout``: ``mesh=``, else the context mesh (unless ``devices=``
    was given), else None (the layout builds its own)."""
    if mesh is not None:
        if devices is not None:
            raise ValueError(f"{layout}: pass mesh= or devices=, not both (the mesh names its "
                             "devices)")
        if not isinstance(mesh, Mesh):
            raise TypeError(f"{layout}: mesh must be a jax.sharding.Mesh (e.g. from "
                            f"jax.make_mesh), got {type(mesh).__name__}")
        return mesh
    return context_mesh() if devices is None else None


def model_axis(mesh: Mesh, model_size: int, axis: str | None, layout: str) -> str:
    """The mesh axis a model replica runs along: ``axis``, else the mesh's last axis; its size
    must be ``model_size``."""
    names = tuple(mesh.axis_names)
    if axis is None:
        if len(names) < 2:
            raise ValueError(
                f"{layout}: the mesh has the single axis {names!r}; a model "
                f"replica needs its own axis, e.g. jax.make_mesh((n // {model_size}, "
                f"{model_size}), ('data', 'model'))")
        axis = names[-1]
    elif axis not in names:
        raise ValueError(f"{layout}: model_axis={axis!r} is not an axis of the mesh, whose axes "
                         f"are {names!r}")
    if mesh.shape[axis] != model_size:
        raise ValueError(
            f"{layout}: the mesh's model axis {axis!r} has size "
            f"{mesh.shape[axis]}, not {model_size} (mesh {dict(mesh.shape)}). Pass the size of "
            f"that axis, or name the model axis with model_axis=")
    return axis


def other_axes(mesh: Mesh, axis: str) -> tuple[str, ...]:
    """The mesh's axes other than ``axis``, in mesh order: those a batch is sharded over when
    ``axis`` holds model replicas."""
    return tuple(a for a in mesh.axis_names if a != axis)


def replica_processes(mesh: Mesh, axis: str) -> list[set[int]]:
    """For each model replica (the devices along ``axis`` at one position of the other axes),
    the processes its devices are on."""
    moved = np.moveaxis(mesh.devices, list(mesh.axis_names).index(axis), -1)
    return [{d.process_index for d in row} for row in moved.reshape(-1, moved.shape[-1])]
