"""How a Grain MapDataset is read: by index without threads by default, or with the user's
ReadOptions; the same rows and an exact resume either way (8 in-process CPU devices)."""

from __future__ import annotations

import json
import threading

import grain
import jax
import numpy as np
import pytest

import jaxload

ROWS, BATCH = 96, 16


def _dataset(kind: str):
    ds = grain.MapDataset.range(ROWS).map(lambda i: {"x": np.float32(i), "y": np.full(3, i)})
    if kind == "filtered":  # only the even rows: Grain cannot batch this by index
        ds = grain.MapDataset.range(2 * ROWS).filter(lambda i: i % 2 == 0).map(
            lambda i: {"x": np.float32(i // 2), "y": np.full(3, i // 2)})
    return ds


def _loader(kind: str, **kwargs):
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=2) if kind == "threads" else None
    return jaxload.from_grain(_dataset(kind), jaxload.data_parallel(), global_batch_size=BATCH,
                              read_options=options, **kwargs)


def _rows(batch) -> list[int]:
    x = np.concatenate([np.asarray(s.data) for s in sorted(
        batch["x"].addressable_shards, key=lambda s: s.index[0].start or 0)])
    np.testing.assert_array_equal(np.asarray(batch["y"])[:, 0], x)
    return x.astype(int).tolist()


@pytest.mark.parametrize("kind", ["index", "threads", "filtered"])
def test_every_row_in_order_and_an_exact_resume(kind):
    batches = [_rows(b) for b in _loader(kind, prefetch=0)]
    assert batches == [list(range(i, i + BATCH)) for i in range(0, ROWS, BATCH)]
    loader = _loader(kind)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(loader.get_state()))
    fresh = _loader(kind)
    fresh.set_state(state)
    assert [_rows(b) for b in fresh] == batches[3:]


def test_the_index_position_is_the_next_batch():
    loader = _loader("index")
    it = iter(loader)
    next(it), next(it)
    assert loader.get_state()["position"] == {"next_batch": 2}
    bad = {**loader.get_state(), "position": {"next_index": 2}}
    loader.set_state(bad, head_start=False)
    with pytest.raises(ValueError, match=r"position is \{'next_batch': <int>\}, got"):
        next(iter(loader))
    # with the head start, the pass starts (and the position is refused) in set_state
    with pytest.raises(ValueError, match=r"position is \{'next_batch': <int>\}, got"):
        loader.set_state(bad)


def test_no_thread_is_started_unless_read_options_ask_for_it():
    def threads_while_reading(kind):
        before = set(threading.enumerate())
        it = iter(_loader(kind, prefetch=0))
        jax.block_until_ready(next(it))
        new = set(threading.enumerate()) - before
        it.close()
        return new

    assert threads_while_reading("index") == set()
    assert threads_while_reading("threads")  # Grain's pool, as asked


def test_read_options_of_the_wrong_type_are_refused():
    with pytest.raises(TypeError, match="read_options must be a grain.ReadOptions or None, got "
                                        "dict"):
        jaxload.from_grain(_dataset("index"), jaxload.data_parallel(), global_batch_size=BATCH,
                           read_options={"num_threads": 2})
