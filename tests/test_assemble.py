"""Assembly and input validation in one process with 8 CPU devices."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import jaxload


@pytest.fixture
def plan():
    return jaxload.model_replicas_in_process(2).plan(8)  # 4 replicas x 2 rows


def test_leaves_of_any_rank_and_dtype_keep_structure(plan):
    batch = {
        "x": np.arange(8, dtype=np.float32),
        "nested": (np.ones((8, 2, 3), np.int8), {"flag": np.arange(8) % 2 == 0}),
        "bf16": np.ones((8, 1), jax.numpy.bfloat16),
    }
    out = jaxload.assemble(batch, plan)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(batch)
    rows_of = {d: slice(a, b) for d, a, b in plan.device_rows}
    for leaf, source in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(batch), strict=True):
        assert leaf.sharding == plan.sharding
        assert leaf.shape == source.shape
        np.testing.assert_array_equal(np.asarray(leaf), source)
        for shard in leaf.addressable_shards:  # devices of one replica hold the same rows
            np.testing.assert_array_equal(np.asarray(shard.data), source[rows_of[shard.device.id]])


def test_wrong_leading_dim_names_the_feature(plan):
    with pytest.raises(ValueError, match=r"batch\['y'\] has shape \(7, 2\).*local_batch_size=8"):
        jaxload.assemble({"x": np.zeros(8), "y": np.zeros((7, 2))}, plan)


def test_scalar_leaf_is_refused(plan):
    with pytest.raises(ValueError, match=r"batch\[1\] has shape \(\)"):
        jaxload.assemble((np.zeros(8), np.float32(1)), plan)


def test_string_leaf_is_refused_before_device_work(plan):
    with pytest.raises(TypeError, match=r"batch\['name'\] has dtype <U1 \(first value np.str_\('a'\)\)"):
        jaxload.assemble({"x": np.zeros(8), "name": np.array(list("abcdefgh"))}, plan)


def _aliases(host: np.ndarray, array: jax.Array) -> list[bool]:
    """Per device: does its buffer lie inside the host array's memory (no copy was made)?"""
    start, stop = host.ctypes.data, host.ctypes.data + host.nbytes
    return [start <= s.data.unsafe_buffer_pointer() < stop for s in array.addressable_shards]


def test_aligned_batches_reach_cpu_devices_without_a_copy():
    from jaxload._src.adapters.stack import stack_elements
    from jaxload._src.assemble import aligned_empty

    plan = jaxload.data_parallel().plan(16)
    host = aligned_empty((16, 1024), np.float32)
    host[:] = np.arange(16)[:, None]
    assert host.ctypes.data % 64 == 0
    assert all(_aliases(host, jaxload.assemble({"x": host}, plan)["x"]))
    # the Grain adapter stacks elements into such a buffer, so its batches are not copied again
    stacked = stack_elements([{"x": np.full(1024, i, np.float32)} for i in range(16)])["x"]
    assert all(_aliases(stacked, jaxload.assemble({"x": stacked}, plan)["x"]))
    # a buffer off the 64-byte boundary is copied (the one host copy jaxload makes)
    raw = np.empty(16 * 1024 * 4 + 64, np.uint8)
    start = (-raw.ctypes.data % 64) + 16
    unaligned = raw[start : start + 16 * 1024 * 4].view(np.float32).reshape(16, 1024)
    unaligned[:] = host
    assert not any(_aliases(unaligned, jaxload.assemble({"x": unaligned}, plan)["x"]))


def test_integers_that_jax_would_narrow_out_of_range_are_refused_naming_the_feature(plan):
    if jax.config.jax_enable_x64:
        pytest.skip("64-bit types are on: nothing is narrowed")
    ids = np.arange(8, dtype=np.int64)
    out = jaxload.assemble({"id": ids}, plan)  # in range: held as int32, the same values
    assert out["id"].dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out["id"]), ids)
    for wide, value in ((np.int64, 3_000_000_000), (np.int64, -2**31 - 1), (np.uint64, 2**32)):
        batch = {"x": np.zeros(8, np.float32), "id": (ids + value).astype(wide)}
        shown = value + (7 if value > 0 else 0)  # the first out of range: the largest or least
        with pytest.raises(ValueError, match=rf"feature batch\['id'\] holds {shown} "
                                             r"\((u?int64)\), outside the range .*jax_enable_x64"):
            jaxload.assemble(batch, plan)


def test_float64_values_past_float32_are_refused_and_nan_and_inf_pass(plan):
    if jax.config.jax_enable_x64:
        pytest.skip("64-bit types are on: nothing is narrowed")
    x = np.linspace(-1.0, 1.0, 8)  # float64, in range: held as float32
    special = x.copy()
    special[[1, 3, 5]] = [np.nan, np.inf, -np.inf]  # they stay what they are: no error
    for ok in (x, special, np.full(8, np.nan), np.full(8, 3.0e38)):
        out = jaxload.assemble({"x": ok}, plan)["x"]
        assert out.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(out), ok.astype(np.float32))
    for value in (1e39, -7e40):
        wide = special.copy()
        wide[6] = value  # beside a NaN and infinities: the finite value is what is named
        with pytest.raises(ValueError, match=re.escape(f"feature batch['x'] holds {value:g}")
                           + r" \(float64\), outside the range of float32 \[-3\.4028235e\+38, "
                           r"3\.4028235e\+38\]: .* would arrive as "
                           rf"{'-' if value < 0 else ''}inf with no error.*scale the values"):
            jaxload.assemble({"x": wide}, plan)


@pytest.mark.parametrize("backend", ["tf.data", "grain"])
def test_a_loader_refuses_ids_that_would_wrap_at_the_batch_that_holds_them(backend):
    if jax.config.jax_enable_x64:
        pytest.skip("64-bit types are on: nothing is narrowed")
    ids = np.arange(64, dtype=np.int64) + np.where(np.arange(64) < 40, 0, 3_000_000_000)
    layout = jaxload.data_parallel()
    if backend == "tf.data":
        tf = pytest.importorskip("tensorflow")
        loader = jaxload.from_tf_data(tf.data.Dataset.from_tensor_slices({"id": ids}), layout,
                                      global_batch_size=8, prefetch=0)
    else:
        grain = pytest.importorskip("grain")
        loader = jaxload.from_grain(grain.MapDataset.source(ids).map(lambda i: {"id": i}), layout,
                                    global_batch_size=8, prefetch=0)
    batches = iter(loader)
    for step in range(5):  # rows 0-39: in range, delivered as they are
        np.testing.assert_array_equal(np.asarray(next(batches)["id"]), ids[8 * step:8 * step + 8])
    with pytest.raises(ValueError, match=r"feature batch\['id'\] holds 3000000047 \(int64\)"):
        next(batches)
