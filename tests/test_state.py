"""Resuming: 3 steps, get_state, JSON round trip, a fresh loader with set_state gives the same
next 2 batches as the original, on every process of real 2x4 and 4x2 runs."""

from __future__ import annotations

import json

import grain
import numpy as np
import pytest

import jaxload
import jaxload.testing

# (topology, layout, backend, prefetch)
CASES = [
    ((2, 4), "data_parallel", "tf", 2),
    ((2, 4), "data_parallel", "grain", 0),
    ((2, 4), "in_process", "grain", 2),
    ((2, 4), "in_process", "tf", 0),
    ((4, 2), "across_processes", "tf", 2),
    ((4, 2), "across_processes", "grain", 2),
]


def shards(batch) -> dict:
    return {s.device.id: np.asarray(s.data) for s in batch["x"].addressable_shards}


def resume(cases):
    from placement import make_layout, make_loader

    out = []
    for layout_name, backend, prefetch in cases:
        layout = make_layout(layout_name)
        kwargs = dict(global_batch_size=16, prefetch=prefetch)
        original = make_loader(backend, layout, range(400), **kwargs)
        it = iter(original)
        for _ in range(3):
            next(it)
        state = json.loads(json.dumps(original.get_state()))
        expected = [shards(next(it)) for _ in range(2)]
        fresh = make_loader(backend, layout, range(400), **kwargs)
        fresh.set_state(state)
        it = iter(fresh)
        got = [shards(next(it)) for _ in range(2)]
        out.append({"state": state, "expected": expected, "got": got})
    return out


@pytest.mark.cluster
@pytest.mark.parametrize("topology", sorted({c[0] for c in CASES}))
def test_resume_gives_the_same_next_batches(clusters, topology):
    cases = [c[1:] for c in CASES if c[0] == topology]
    per_process = clusters.run(resume, num_processes=topology[0],
                               local_devices=topology[1], args=(cases,), timeout_s=240)
    for process, results in enumerate(per_process):
        for case, r in zip(cases, results, strict=True):
            assert r["state"]["step"] == 3, (case, r["state"])
            assert r["state"]["plan"]["process_index"] == process
            for want, have in zip(r["expected"], r["got"], strict=True):
                assert want.keys() == have.keys()
                for device in want:
                    np.testing.assert_array_equal(want[device], have[device], err_msg=str(case))


def test_a_state_that_cannot_continue_is_refused():
    ds = grain.MapDataset.range(64).map(lambda i: {"x": i})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
    next(iter(loader))
    state = loader.get_state()
    with pytest.raises(ValueError, match=r"taken with remainder='drop', this loader has "
                                         r"remainder='pad'"):
        jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16,
                           remainder="pad").set_state(state)
    with pytest.raises(ValueError, match=r"taken with length=64, this loader has length=65"):
        jaxload.from_grain(grain.MapDataset.range(65).map(lambda i: {"x": i}),
                           jaxload.data_parallel(), global_batch_size=16).set_state(state)
    with pytest.raises(ValueError, match="not a jaxload loader state"):
        loader.set_state({"step": 3})


def test_state_before_and_after_a_pass_is_the_start():
    ds = grain.MapDataset.range(32).map(lambda i: {"x": i})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8)
    assert loader.get_state()["step"] == 0 and loader.get_state()["position"] is None
    assert len(list(loader)) == 4
    assert loader.get_state()["step"] == 0  # the next pass starts from the beginning


def batched_resume():
    """The user's own batches (``batched=True``) over 2 loading groups: 3 steps, a state, the
    rest of the pass; then a fresh loader resumed from the state, for both backends."""
    import jax
    import tensorflow as tf

    layout, size = jaxload.data_parallel(), 16 // jax.process_count()
    made = {
        "grain": lambda: jaxload.from_grain(grain.MapDataset.range(160).map(
            lambda i: {"x": np.int64(i)}).batch(size, drop_remainder=True), layout,
            global_batch_size=16, batched=True),
        "tf": lambda: jaxload.from_tf_data(tf.data.Dataset.range(160).map(
            lambda i: {"x": i}).batch(size, drop_remainder=True), layout, global_batch_size=16,
            batched=True),
    }
    out = {}
    for backend, make in made.items():
        loader = make()
        batches = iter(loader)
        for _ in range(3):
            next(batches)
        state = json.loads(json.dumps(loader.get_state()))
        rest = [shards(batch) for batch in batches]
        fresh = make()
        fresh.set_state(state)
        out[backend] = rest, [shards(batch) for batch in fresh]
    return out


@pytest.mark.cluster
def test_the_users_own_batches_over_several_groups_resume_exactly(clusters):
    """A state's rows count the rows of the user's batches, not the batches: a state at step 3
    of 10 is not refused as past the end of a pipeline of 20 batches of 8 rows."""
    for out in clusters.run(batched_resume, num_processes=2, local_devices=4, timeout_s=120):
        for backend, (rest, after) in out.items():
            assert len(rest) == 7 and len(after) == len(rest), backend
            for want, have in zip(rest, after, strict=True):
                assert want.keys() == have.keys()
                for device in want:
                    np.testing.assert_array_equal(want[device], have[device], err_msg=backend)


def test_a_state_of_a_pipeline_split_another_way_says_why_and_what_to_do():
    # two files split by files at 2 loading groups fall back to elements at 4: the refusal named
    # only the two backends
    from jaxload._src.state import check_unchanged

    with pytest.raises(ValueError, match=r"backend='tf.data/files', this loader has "
                       r"backend='tf.data'; .* split another way here .* shard='elements'"):
        check_unchanged({"backend": "tf.data/files"}, {"backend": "tf.data"}, ("backend",))
    with pytest.raises(ValueError, match=r"remainder mode$"):
        check_unchanged({"backend": "grain"}, {"backend": "tf.data"}, ("backend",))
