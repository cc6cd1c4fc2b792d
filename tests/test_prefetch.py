"""Prefetching: same batches as without, errors with their traceback, no leaked threads."""

from __future__ import annotations

import threading
import time
import traceback

import grain
import numpy as np
import pytest

import jaxload
from jaxload._src.prefetch import prefetched


def prefetch_threads() -> int:
    return sum(t.name == "jaxload-prefetch" and t.is_alive() for t in threading.enumerate())


def ids(loader):
    return [np.asarray(b["id"]).tolist() for b in loader]


def test_same_batches_with_and_without_prefetch():
    ds = grain.MapDataset.range(100).map(lambda i: {"id": i})
    layout = jaxload.data_parallel()
    off = ids(jaxload.from_grain(ds, layout, global_batch_size=16, prefetch=0))
    on = ids(jaxload.from_grain(ds, layout, global_batch_size=16, prefetch=3))
    assert off == on and len(on) == 6


def exploding(i):
    if i == 40:
        raise KeyError("record 40 is missing")
    return {"id": i}


def test_producer_errors_keep_their_traceback():
    ds = grain.MapDataset.range(100).map(exploding)
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8, prefetch=2)
    with pytest.raises(KeyError, match="record 40 is missing") as raised:
        list(loader)
    frames = [f.name for f in traceback.extract_tb(raised.value.__traceback__)]
    assert "exploding" in frames  # the user's function, where it really failed
    time.sleep(0.6)
    assert prefetch_threads() == 0


def test_an_error_building_the_producer_reaches_the_consumer():
    def produce():
        raise OSError("cannot open the pipeline")

    with pytest.raises(OSError, match="cannot open the pipeline"):
        next(prefetched(produce, depth=2))  # not a wait for good
    time.sleep(0.6)
    assert prefetch_threads() == 0


def test_breaking_early_stops_the_thread():
    ds = grain.MapDataset.range(10_000).map(lambda i: {"id": i})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8, prefetch=2)
    for step, _ in enumerate(loader):
        if step == 3:
            break
    time.sleep(0.6)
    assert prefetch_threads() == 0


def test_prefetch_runs_ahead_of_the_consumer():
    produced = []

    def produce():
        for i in range(5):
            produced.append(i)
            yield i

    it = prefetched(produce, depth=2)
    assert next(it) == 0
    time.sleep(0.3)
    assert len(produced) >= 3  # 0 consumed, two more waiting
    assert list(it) == [1, 2, 3, 4]


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_bad_prefetch_value(value):
    with pytest.raises(ValueError, match=rf"prefetch={value!r} must be an int >= 0"):
        jaxload.from_grain(grain.MapDataset.range(8), jaxload.data_parallel(),
                           global_batch_size=8, prefetch=value)


def test_a_round_s_window_is_read_between_the_handouts_not_all_at_once():
    """A pipeline of unknown length is agreed on in rounds of up to 16 steps, each round's
    batches read ahead first. Those reads are spread over the previous round's handouts, so the
    pipeline keeps reading while the training step consumes and no step waits for a whole
    window (prefetch=0: the reads happen inside next(), in a deterministic order)."""
    events = []

    def read(i):
        if i % 8 == 7:
            events.append(("read", i // 8))
        return {"id": i}

    ds = grain.MapDataset.range(40 * 8).map(read).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8, shard=False,
                                prefetch=0)
    for step, batch in enumerate(loader):
        assert np.asarray(batch["id"]).tolist() == list(range(8 * step, 8 * step + 8))
        events.append(("got", step))
    assert [e[1] for e in events if e[0] == "got"] == list(range(40))
    assert [e[1] for e in events if e[0] == "read"] == list(range(40))
    runs, run = [], 0
    for kind, _ in events:
        run = run + 1 if kind == "read" else runs.append(run) or 0
    assert max(runs) <= 2, runs  # a whole window (up to 16) read before a step, without it


def test_what_is_handed_to_a_closing_thread_after_its_end_is_closed_too():
    # drain() queues the end while the thread lives; a start() then sees it alive and starts
    # none, so what is handed over next must not wait for another start()
    import threading

    from jaxload._src.prefetch import BackgroundCloser

    busy, closed = threading.Event(), []

    class Item:
        def __init__(self, name, wait=False):
            self.name, self.wait = name, wait

        def close(self):
            if self.wait:
                busy.wait(10)
            closed.append(self.name)

    closing = BackgroundCloser("jaxload-test-close")
    closing.start()
    closing.close_later(Item("first", wait=True))
    closing.stop()
    closing.start()  # sees the thread alive: starts none
    closing.close_later(Item("after the end"))
    busy.set()
    closing.drain(10)
    assert closed == ["first", "after the end"]
