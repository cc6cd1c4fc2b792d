"""loader.batch_spec(): the global batch's shapes, dtypes and shardings before any data, so that a
step compiles ahead of time (``jax.jit(step).lower(params, spec).compile()``) and the compiled
step then runs on every real batch, in real processes at 2x4 and 4x2 with both backends."""

from __future__ import annotations

import numpy as np
import pytest

import jaxload
import jaxload.testing


def sizes(G: int, scheduled: bool) -> list[tuple[int, int]]:
    """The global batch size from each step on: ``G``, or a schedule ``G, 2G, 4G``."""
    return [(0, G), (2, 2 * G), (4, 4 * G)] if scheduled else [(0, G)]


def compile_then_run(backend: str, layout_name: str, remainder: str, scheduled: bool = False):
    """Worker side: compile before iterating (one step per size of a schedule), then run the
    step compiled for each step's size on every batch."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    layouts = {"data_parallel": lambda: jaxload.data_parallel(),
               "in_process": lambda: jaxload.model_replicas_in_process(2),
               "across_processes": lambda: jaxload.model_replicas_across_processes(2)}
    layout = layouts[layout_name]()
    n, G = 100, 2 * layout.num_batch_shards  # 100 rows: the last step is partial
    G = sizes(G, True) if scheduled else G
    if backend == "grain":
        import grain

        ds = grain.MapDataset.range(n).map(
            lambda i: {"x": np.full((3,), i, np.float32), "id": np.int32(i)})
        loader = jaxload.from_grain(ds, layout, global_batch_size=G, remainder=remainder)
    else:
        import tensorflow as tf

        ds = tf.data.Dataset.range(n).map(
            lambda i: {"x": tf.fill([3], tf.cast(i, tf.float32)), "id": tf.cast(i, tf.int32)})
        loader = jaxload.from_tf_data(ds, layout, global_batch_size=G, remainder=remainder)
    spec = loader.batch_spec()
    described = {k: (v.shape, str(v.dtype), str(v.sharding.spec)) for k, v in spec.items()}
    params = jax.device_put(jnp.ones((3,), jnp.float32),
                            jax.sharding.NamedSharding(layout.mesh, P()))

    def step(w, batch):
        return jnp.sum(batch["x"] @ w) + jnp.sum(batch["id"])

    compiled = {first: jax.jit(step).lower(params, loader.batch_spec(first)).compile()
                for first, _ in (G if scheduled else [(0, G)])}  # before any data
    assert loader.stats().steps == 0
    totals = []
    for k, batch in enumerate(loader):
        totals.append(float(compiled[max(f for f in compiled if f <= k)](params, batch)))
    return dict(spec=described, totals=totals, again=loader.batch_spec(step=1) == spec)


CASES = [("grain", topology, layout_name, remainder, False)
         for topology, layout_name in [((2, 4), "data_parallel"), ((2, 4), "in_process"),
                                       ((4, 2), "across_processes")]
         for remainder in ("drop", "pad")] + [
    ("tf", (2, 4), "data_parallel", "pad", False), ("tf", (4, 2), "across_processes", "drop", False),
    ("tf", (2, 4), "in_process", "drop", False),
    ("grain", (2, 4), "data_parallel", "pad", True),  # under a schedule: G, 2G, 4G
    ("tf", (4, 2), "across_processes", "drop", True), ("tf", (2, 4), "in_process", "pad", True)]


@pytest.mark.cluster
@pytest.mark.parametrize("backend,topology,layout_name,remainder,scheduled", CASES,
                         ids=[f"{b}-{t[0]}x{t[1]}-{n}-{r}{'-schedule' * s}"
                              for b, t, n, r, s in CASES])
def test_a_step_compiled_from_the_spec_runs_on_every_batch(clusters, backend, topology, layout_name,
                                                          remainder, scheduled):
    results = clusters.run(compile_then_run, num_processes=topology[0],
                           local_devices=topology[1],
                           args=(backend, layout_name, remainder, scheduled),
                           timeout_s=180)
    first = results[0]
    G = first["spec"]["x"][0][0]
    assert first["spec"]["x"][0] == (G, 3) and first["spec"]["x"][1] == "float32"
    assert first["spec"]["id"][0] == (G,) and first["spec"]["id"][1] == "int32"
    if remainder == "pad":
        assert first["spec"]["mask"][:2] == ((G,), "bool")
    else:
        assert "mask" not in first["spec"]
    bounds = [0]  # each step's first row, and the end of the last step's rows
    while bounds[-1] < 100:
        size = [size for f, size in sizes(G, scheduled) if f <= len(bounds) - 1][-1]
        if bounds[-1] + size > 100 and remainder == "drop":
            break
        bounds.append(bounds[-1] + size)
    for r in results:
        assert r["spec"] == first["spec"] and r["again"]
        assert len(r["totals"]) == len(bounds) - 1
    # each step's total is 4 x the sum of its real ids (x is 3 copies of the id, plus the id);
    # padding rows are zeros
    expected = [4.0 * sum(range(a, min(b, 100))) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert results[0]["totals"] == pytest.approx(expected)


def test_a_bad_step_is_refused():
    import grain

    ds = grain.MapDataset.range(64).map(lambda i: {"x": np.float32(i)})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="step="):
            loader.batch_spec(step=bad)


def test_the_spec_is_read_without_moving_the_loader():
    import grain

    ds = grain.MapDataset.range(64).map(lambda i: {"x": np.full(2, i, np.float32)})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
    spec = loader.batch_spec()
    assert spec["x"].shape == (16, 2) and spec["x"].sharding == loader.layout.sharding
    first = next(iter(loader))
    assert np.asarray(first["x"])[:, 0].tolist() == list(range(16))  # still from the start
    assert loader.get_state()["step"] == 1
