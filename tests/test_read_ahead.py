"""Reading per-process batches ahead of the loader on their own thread."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from jaxload.prefetch import read_ahead


def _batches(n: int, fail_at: int | None = None):
    def local_batches(position):
        for i in range(position or 0, n):
            if i == fail_at:
                raise ValueError(f"pipeline failed at batch {i}")
            yield {"x": np.full(4, i)}, i + 1
    return local_batches


def test_the_same_batches_and_positions_from_any_start():
    ahead = read_ahead(_batches(10), depth=4)
    got = [(int(b["x"][0]), p) for b, p in ahead(3)]
    assert got == [(i, i + 1) for i in range(3, 10)]
    plain = _batches(10)
    assert read_ahead(plain, depth=0) is plain  # prefetch=0: no thread


def test_a_pipeline_error_reaches_the_reader_with_its_message():
    with pytest.raises(ValueError, match="pipeline failed at batch 5"):
        list(read_ahead(_batches(10, fail_at=5), depth=4)(None))


def test_the_reading_thread_stops_when_the_reader_stops_early():
    before = set(threading.enumerate())
    it = read_ahead(_batches(1000), depth=8)(None)
    next(it), next(it)
    assert set(threading.enumerate()) - before  # reading ahead
    it.close()
    assert set(threading.enumerate()) - before == set()


def test_the_depth_is_bounded_by_bytes():
    seen = []

    def local_batches(position):
        for i in range(100):
            seen.append(i)
            yield {"x": np.zeros(1024, np.uint8)}, i + 1

    it = read_ahead(local_batches, depth=50, max_bytes=3 * 1024)(None)
    next(it)
    time.sleep(0.3)
    assert len(seen) <= 1 + 3 + 2  # the first, 3 queued, one in the thread's hand, one read
    it.close()
