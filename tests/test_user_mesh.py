"""Batches on the user's own mesh, the way JAX is written today: ``jax.make_mesh`` (``Explicit``
axes by default) and ``with jax.set_mesh(mesh):`` around the loop, steps that use
``jax.shard_map`` over the batch axes, ``jax.sharding.reshard``, and parameters sharded over the
model axis. Real processes at 2x4 and 4x2, both backends; every process records what each device
holds and what each step computed, and the parent checks both against the loaded rows.
"""

from __future__ import annotations

import numpy as np
import pytest

import jaxload
import jaxload.testing
from placement import element

GLOBAL = 16
STEPS = 2
F = 3  # width of feature "x"


def _mesh(kind: str, axis_type: str):
    """The user's mesh: ("data", "model") with the model axis within processes ("in"), or
    spanning processes ("across")."""
    import jax
    from jax.sharding import AxisType, Mesh

    types = (getattr(AxisType, axis_type),) * 2
    if kind == "in":
        return jax.make_mesh((jax.device_count() // 2, 2), ("data", "model"), axis_types=types)
    devices = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))
    return Mesh(devices.reshape(2, -1).T, ("data", "model"), axis_types=types)


def _layout(name: str, mesh, context: bool):
    from jax.sharding import PartitionSpec as P

    explicit = {} if context else {"mesh": mesh}
    if name == "data_parallel":
        return jaxload.data_parallel(**explicit)
    if name == "in_process":
        return jaxload.model_replicas_in_process(2, **explicit)
    if name == "across":
        return jaxload.model_replicas_across_processes(2, **explicit)
    if name == "context_parallel":  # "img" (2x2 per row) sharded over "model" by columns
        return jaxload.Layout(mesh, "data", {"img": P("data", None, "model")})
    raise ValueError(name)


def _shards(x) -> list:
    return [(s.device.id, [i.indices(n)[:2] for i, n in zip(s.index, x.shape, strict=False)],
             np.asarray(s.data)) for s in x.addressable_shards]


def scenario(backend: str, layout_name: str, axis_type: str, context: bool) -> dict:
    import contextlib

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from placement import make_loader

    mesh = _mesh("across" if layout_name == "across" else "in", axis_type)
    with jax.set_mesh(mesh) if context else contextlib.nullcontext():
        layout = _layout(layout_name, mesh, context)
        loader = make_loader(backend, layout, range(GLOBAL * STEPS), global_batch_size=GLOBAL)
        batch_spec = P(layout.batch_axes)
        # parameters over the model axis (replicated where the batch itself uses that axis)
        w_spec = P() if "model" in layout.batch_axes else P(None, "model")
        w = jax.device_put(np.arange(F * 4, dtype=np.float32).reshape(F, 4),
                           NamedSharding(mesh, w_spec))

        @jax.jit
        def local_sums(x):  # per-device partial sums of its own rows
            return jax.shard_map(lambda b: jnp.sum(b, axis=1, keepdims=True), mesh=mesh,
                                 in_specs=batch_spec, out_specs=batch_spec)(x)

        @jax.jit
        def replicated(x):  # reshard moves Explicit axes; Auto ones take a sharding constraint
            to = NamedSharding(mesh, P())
            if axis_type == "Explicit":
                return jax.sharding.reshard(x * 2, to)
            return jax.lax.with_sharding_constraint(x * 2, to)

        @jax.jit
        def project(x, w):
            return x @ w  # the batch over its axes times parameters over "model"

        steps = []
        for batch in loader:
            x = batch["x"]
            steps.append({
                "mesh": tuple(x.sharding.mesh.axis_names) == tuple(mesh.axis_names),
                "typeof": str(jax.typeof(x).sharding.spec),
                "x": _shards(x), "id": _shards(batch["id"]), "img": _shards(batch["img"]),
                "sums": _shards(local_sums(x)), "doubled": _shards(replicated(x)),
                "projected": _shards(project(x, w)),
            })
    return {"process": jax.process_index(), "batch_axes": layout.batch_axes, "steps": steps,
            "explicit": axis_type == "Explicit"}


def _rows(results, step: int, leaf: str) -> dict[tuple, np.ndarray]:
    """(row, column-slice) -> values, from every process's shards; replicas must agree."""
    seen: dict[tuple, np.ndarray] = {}
    for r in results:
        for device, index, data in r["steps"][step][leaf]:
            key = tuple(index)
            if key in seen:
                assert np.array_equal(seen[key], data), (step, leaf, device, key)
            seen[key] = data
    return seen


def _global(results, step: int, leaf: str, shape: tuple) -> np.ndarray:
    out = np.full(shape, np.nan)
    for index, data in _rows(results, step, leaf).items():
        out[tuple(slice(a, b) for a, b in index)] = data
    assert not np.isnan(out).any(), f"{leaf}: some rows are on no device"
    return out


def verify(results) -> None:
    w = np.arange(F * 4, dtype=np.float32).reshape(F, 4)
    ids_seen = []
    for step in range(STEPS):
        for r in results:
            assert r["steps"][step]["mesh"], "the batch is not on the user's mesh"
            if r["explicit"]:  # Auto axes do not appear in the type
                assert r["batch_axes"][0] in r["steps"][step]["typeof"]
        ids = _global(results, step, "id", (GLOBAL,)).astype(int)
        x = _global(results, step, "x", (GLOBAL, F))
        img = _global(results, step, "img", (GLOBAL, 2, 2))
        for row, i in enumerate(ids):
            assert np.array_equal(x[row], element(i)["x"]) and np.array_equal(img[row], element(i)["img"])
        # each device's shard_map output is the sum of exactly the rows it holds
        for (rows, _), data in _rows(results, step, "sums").items():
            assert np.allclose(data[:, 0], x[rows[0]:rows[1]].sum(axis=1))
        assert np.allclose(_global(results, step, "doubled", (GLOBAL, F)), 2 * x)
        for r in results:  # reshard to replicated: every device holds the whole batch
            assert all(index[0] == (0, GLOBAL) for _, index, _ in r["steps"][step]["doubled"])
        assert np.allclose(_global(results, step, "projected", (GLOBAL, 4)), x @ w)
        ids_seen += list(ids)
    assert sorted(ids_seen) == list(range(GLOBAL * STEPS))


CASES = [
    # topology, backend, layout, axis type, under jax.set_mesh
    ((2, 4), "grain", "data_parallel", "Explicit", True),
    ((2, 4), "tf", "in_process", "Explicit", True),
    ((2, 4), "grain", "across", "Explicit", True),
    ((2, 4), "grain", "context_parallel", "Explicit", True),
    ((2, 4), "grain", "in_process", "Auto", True),
    ((2, 4), "tf", "data_parallel", "Explicit", False),
    ((4, 2), "grain", "in_process", "Explicit", True),
    ((4, 2), "tf", "across", "Explicit", True),
    ((4, 2), "grain", "data_parallel", "Auto", False),
    ((4, 2), "grain", "context_parallel", "Auto", True),
]


@pytest.mark.cluster
@pytest.mark.parametrize("topology,backend,layout,axis_type,context", CASES,
                         ids=[f"{t[0]}x{t[1]}-{b}-{name}-{a}-{'set_mesh' if c else 'mesh='}"
                              for t, b, name, a, c in CASES])
def test_batches_live_on_the_users_mesh(clusters, topology, backend, layout, axis_type, context):
    results = clusters.run(scenario, num_processes=topology[0], local_devices=topology[1],
                           args=(backend, layout, axis_type, context), timeout_s=240)
    verify(results)


def test_a_mesh_that_does_not_fit_is_refused_naming_its_axes():
    import jax
    from jax.sharding import Mesh

    devices = jaxload.simulated_devices(2, 4)
    mesh = Mesh(np.array(devices).reshape(4, 2), ("data", "model"),
                axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    with pytest.raises(ValueError, match="model axis 'model' has size 2, not 4"):
        jaxload.model_replicas_in_process(4, mesh=mesh)
    with pytest.raises(ValueError, match="every model replica .along 'model'. is on one process"):
        jaxload.model_replicas_across_processes(2, mesh=mesh)
    across = Mesh(np.array(devices).reshape(2, 4).T, ("data", "model"))
    with pytest.raises(ValueError, match=r"on processes \[0, 1\], not on one process"):
        jaxload.model_replicas_in_process(2, mesh=across)
    with pytest.raises(ValueError, match="pass mesh= or devices=, not both"):
        jaxload.data_parallel(mesh=mesh, devices=devices)
    assert jaxload.model_replicas_in_process(2, mesh=mesh).batch_axes == ("data",)
    assert jaxload.data_parallel(mesh=mesh).batch_axes == ("data", "model")
