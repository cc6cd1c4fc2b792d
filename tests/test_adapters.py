"""Adapters in one process (8 CPU devices): structures, remainders, bad input, lazy imports."""

from __future__ import annotations

import subprocess
import sys
import warnings

import grain
import numpy as np
import pytest
import tensorflow as tf

import jaxload
from jaxload._src import told


@pytest.fixture
def layout():
    return jaxload.data_parallel()


def test_tf_tuple_elements_and_incomplete_last_batch(layout):
    ds = tf.data.Dataset.range(20).map(lambda i: (i, (tf.fill([2], i), i % 3 == 0)))
    batches = list(jaxload.from_tf_data(ds, layout, global_batch_size=8))
    assert len(batches) == 2  # 20 rows: two full batches, the last 4 rows dropped
    ids, (filled, flag) = batches[1]
    np.testing.assert_array_equal(np.asarray(ids), np.arange(8, 16))
    np.testing.assert_array_equal(np.asarray(filled), np.repeat(np.arange(8, 16), 2).reshape(8, 2))
    np.testing.assert_array_equal(np.asarray(flag), np.arange(8, 16) % 3 == 0)


def test_grain_scalar_elements(layout):
    batches = list(jaxload.from_grain(grain.MapDataset.range(17), layout, global_batch_size=8))
    assert [np.asarray(b).tolist() for b in batches] == [list(range(8)), list(range(8, 16))]


def test_grain_iter_dataset_unsharded(layout):
    ds = grain.MapDataset.range(16).map(lambda i: {"v": np.full(3, i)}).to_iter_dataset()
    batches = list(jaxload.from_grain(ds, layout, global_batch_size=8, shard=False))
    assert np.asarray(batches[1]["v"])[:, 0].tolist() == list(range(8, 16))


def test_grain_iter_dataset_of_one_loading_group_is_read_whole(layout):
    ds = grain.MapDataset.range(20).map(lambda i: {"v": np.int32(i)}).to_iter_dataset()
    loader = jaxload.from_grain(ds, layout, global_batch_size=8, remainder="pad")
    batches = [np.asarray(b["v"]).tolist() for b in loader]
    assert batches == [list(range(8)), list(range(8, 16)), [16, 17, 18, 19, 0, 0, 0, 0]]


@pytest.mark.parametrize("make,backend", [(jaxload.from_grain, "grain.MapDataset"),
                                          (jaxload.from_tf_data, "tf.data.Dataset")])
def test_wrong_pipeline_type(layout, make, backend):
    with pytest.raises(TypeError, match=f"expects a {backend}.*got list"):
        make([1, 2, 3], layout, global_batch_size=8)


def test_tf_string_feature_is_refused_before_reading(layout):
    ds = tf.data.Dataset.from_tensor_slices({"x": [1.0, 2.0], "name": ["a", "b"]})
    with pytest.raises(TypeError, match=r"feature batch\['name'\] has dtype string"):
        jaxload.from_tf_data(ds, layout, global_batch_size=8)


def test_tf_unknown_dimension_is_refused(layout):
    ds = tf.data.Dataset.range(4).map(lambda i: {"tokens": tf.range(i)})
    with pytest.raises(ValueError, match=r"feature batch\['tokens'\] has shape \(None,\)"):
        jaxload.from_tf_data(ds, layout, global_batch_size=8)


def test_tf_ragged_feature_is_refused(layout):
    ds = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1], [2, 3]]))
    with pytest.raises(TypeError, match=r"feature batch is a RaggedTensorSpec"):
        jaxload.from_tf_data(ds, layout, global_batch_size=8)


def test_grain_string_feature_is_refused(layout):
    ds = grain.MapDataset.range(16).map(lambda i: {"x": i, "name": str(i)})
    with pytest.raises(TypeError, match=r"feature batch\['name'\] has dtype <U"):
        next(iter(jaxload.from_grain(ds, layout, global_batch_size=8)))


@pytest.mark.cluster
def test_import_needs_neither_backend():
    code = "import sys, jaxload; print(sorted({'tensorflow', 'grain'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("make,ds", [
    (jaxload.from_grain, lambda: grain.MapDataset.range(8)),
    (jaxload.from_tf_data, lambda: tf.data.Dataset.range(8)),
])
def test_unknown_remainder_mode_lists_the_valid_ones(layout, make, ds):
    message = r"remainder='keep' is not a remainder mode; valid modes: 'drop', 'pad'"
    with pytest.raises(ValueError, match=message):
        make(ds(), layout, global_batch_size=8, remainder="keep")


def test_pad_delivers_the_last_rows_with_a_mask(layout):
    ds = grain.MapDataset.range(20).map(lambda i: {"v": np.full(2, i, np.int32)})
    batches = list(jaxload.from_grain(ds, layout, global_batch_size=8, remainder="pad"))
    assert len(batches) == 3
    last = batches[-1]
    np.testing.assert_array_equal(np.asarray(last["mask"]), np.arange(8) < 4)
    np.testing.assert_array_equal(np.asarray(last["v"])[:, 0], [16, 17, 18, 19, 0, 0, 0, 0])
    kept = jaxload.unpad({"v": last["v"]}, last["mask"])
    np.testing.assert_array_equal(kept["v"][:, 0], [16, 17, 18, 19])


def test_pad_needs_dict_elements(layout):
    ds = tf.data.Dataset.range(8).map(lambda i: (i, i))
    with pytest.raises(TypeError, match="remainder='pad' adds a boolean 'mask' feature and needs dict"):
        next(iter(jaxload.from_tf_data(ds, layout, global_batch_size=8, remainder="pad")))


@pytest.mark.parametrize("ds,error,message", [
    (lambda: tf.data.Dataset.range(8).map(lambda i: (i, i)), TypeError, "got tuple elements"),
    (lambda: tf.data.Dataset.range(8), TypeError, "got ndarray elements"),
    (lambda: tf.data.Dataset.range(8).map(lambda i: {"mask": i}), ValueError,
     r"already have a feature batch\['mask'\]"),
])
def test_a_tf_data_pipeline_pad_cannot_mask_is_refused_at_the_build(layout, ds, error, message):
    """Refused by from_tf_data on every process alike, from the element spec: at the first
    step, the first process to fail would end the others with a PeerFailedError instead."""
    with pytest.raises(error, match=message):
        jaxload.from_tf_data(ds(), layout, global_batch_size=8, remainder="pad")
    jaxload.from_tf_data(ds(), layout, global_batch_size=8, remainder="drop")  # drop: no mask


def test_pad_refuses_an_existing_mask_feature(layout):
    ds = grain.MapDataset.range(8).map(lambda i: {"mask": i})
    with pytest.raises(ValueError, match=r"already have a feature batch\['mask'\]"):
        next(iter(jaxload.from_grain(ds, layout, global_batch_size=8, remainder="pad")))


def test_empty_pipeline_yields_nothing(layout):
    assert list(jaxload.from_grain(grain.MapDataset.range(0), layout, global_batch_size=8)) == []
    assert list(jaxload.from_tf_data(tf.data.Dataset.range(0), layout, global_batch_size=8,
                                     remainder="pad")) == []


def test_grain_shape_change_within_a_batch_names_the_feature(layout):
    ds = grain.MapDataset.range(16).map(lambda i: {"x": np.zeros(2 + (i == 5))})
    with pytest.raises(ValueError, match=r"feature batch\['x'\] has shape \(2,\) in element 0 but "
                                         r"\(3,\) in element 5 of the same batch"):
        next(iter(jaxload.from_grain(ds, layout, global_batch_size=8)))


@pytest.mark.parametrize("extra,change", [(True, "appears"), (False, "disappears")])
def test_grain_structure_change_names_the_key(layout, extra, change):
    def element(i):
        out = {"x": np.float32(i)}
        if (i == 3) == extra:
            out["label"] = np.int32(i)
        return out

    ds = grain.MapDataset.range(16).map(element)
    with pytest.raises(ValueError, match=rf"feature batch\['label'\] {change}"):
        next(iter(jaxload.from_grain(ds, layout, global_batch_size=8)))


def test_shape_change_between_batches_is_refused(layout):
    ds = grain.MapDataset.range(16).map(lambda i: {"x": np.zeros(2 if i < 8 else 3, np.float32)})
    loader = iter(jaxload.from_grain(ds, layout, global_batch_size=8))
    next(loader)
    with pytest.raises(ValueError, match=r"batch at step 1 differs from the first one: feature "
                                         r"batch\['x'\] was float32\[2\] at step 0 but is float32\[3\]"):
        next(loader)


def test_tf_already_batched_with_the_wrong_leading_dim_is_refused(layout):
    ds = tf.data.Dataset.range(64).map(lambda i: {"x": i}).batch(4, drop_remainder=True)
    with pytest.raises(ValueError, match=r"feature batch\['x'\] of the already-batched dataset has "
                                         r"shape \(4,\); with batched=True its leading dim must be "
                                         r"local_batch_size=8"):
        jaxload.from_tf_data(ds, layout, global_batch_size=8, batched=True)


def test_tf_batches_of_any_size_under_drop_are_refused_naming_the_batching_ops(layout):
    ds = tf.data.Dataset.range(64).map(lambda i: {"x": i}).padded_batch(8)
    with pytest.raises(ValueError, match=r"its batches can have fewer rows than "
                                         r"local_batch_size=8, which remainder='drop' does not pad"
                                         r".* padded_batch\(8, ..., drop_remainder=True\).*"
                                         r"group_by_window"):
        jaxload.from_tf_data(ds, layout, global_batch_size=8, batched=True)


def test_already_batched_pipelines(layout):
    ds = tf.data.Dataset.range(64).map(lambda i: {"x": i}).batch(8, drop_remainder=True)
    batches = list(jaxload.from_tf_data(ds, layout, global_batch_size=8, batched=True))
    assert len(batches) == 8 and np.asarray(batches[1]["x"]).tolist() == list(range(8, 16))
    gds = grain.MapDataset.range(64).batch(4)
    with pytest.raises(ValueError, match=r"feature batch has shape \(4,\); a per-process batch "
                                         r"needs leading dim local_batch_size=8"):
        next(iter(jaxload.from_grain(gds, layout, global_batch_size=8, batched=True)))


def test_tf_unknown_rank_is_refused(layout):
    ds = tf.data.Dataset.range(4).map(lambda i: tf.py_function(lambda: 1.0, [], tf.float32))
    with pytest.raises(ValueError, match=r"feature batch has shape <unknown>"):
        jaxload.from_tf_data(ds, layout, global_batch_size=8)


def test_a_data_loader_state_of_another_source_is_refused_at_set_state(layout):
    # Grain checks a state against the DataLoader's source by its repr: a source class without
    # one (its default repr holds the object's address) failed at the first step after
    # set_state; now set_state refuses it with Grain's message, on every process
    class Records:
        def __len__(self):
            return 32

        def __getitem__(self, i):
            return {"x": np.int32(i)}

    def make():
        sampler = grain.samplers.IndexSampler(32, grain.sharding.NoSharding(), shuffle=False,
                                              num_epochs=1)
        return jaxload.from_grain(grain.DataLoader(
            data_source=Records(), sampler=sampler, operations=[grain.transforms.Batch(8)]),
            layout, global_batch_size=8)

    loader = make()
    steps = iter(loader)
    next(steps)
    state = loader.get_state()
    steps.close()
    with pytest.raises(ValueError, match=r"(?s)DataSource in checkpoint does not match.*__repr__"):
        make().set_state(state)


def test_tf_elements_batched_by_the_pipeline_without_batched_true_are_named(layout):
    # ds.batch(n) passed without batched=True: an unknown leading dim was refused with advice to
    # pad or crop, and a batch of local_batch_size rows was batched again with no word
    def rows():
        return tf.data.Dataset.range(64).map(lambda i: {"x": i})

    with pytest.raises(ValueError, match=r"Its elements are batches \(its last op but maps and "
                                         r"prefetches is a batch\): if they are per-process "
                                         r"batches, pass batched=True"):
        jaxload.from_tf_data(rows().batch(8), layout, global_batch_size=8)
    told.forget()
    with pytest.warns(UserWarning, match=r"elements are batches of 8 rows .* batches "
                                         r"local_batch_size=8 of them .* pass batched=True"):
        jaxload.from_tf_data(rows().batch(8, drop_remainder=True).prefetch(1), layout,
                             global_batch_size=8)
    told.forget()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a window of 3 per element, and plain rows: no word
        jaxload.from_tf_data(rows().batch(3, drop_remainder=True), layout, global_batch_size=8)
        jaxload.from_tf_data(rows().batch(8).unbatch(), layout, global_batch_size=8)
