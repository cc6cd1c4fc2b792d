"""A head start on restore: after ``set_state`` a prefetching loader reads its next batches in the
background, before the loop's first ``next()``; the batches are those the state points to."""

from __future__ import annotations

import threading

import grain
import numpy as np
import pytest

import jaxload

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def watched_dataset(read: threading.Event):
    """``read`` is set when a row of the third global batch on (32 and later) is read."""
    def element(i):
        if i >= 32:
            read.set()
        return {"id": np.int32(i)}

    return grain.MapDataset.range(64).map(element)


def state_after_two_steps():
    """(From a dataset of its own: its reader threads may still read ahead after the pass.)"""
    ds = watched_dataset(threading.Event())
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
    with iter(loader) as batches:
        next(batches), next(batches)
        return loader.get_state()


def fresh_loader(**options):
    """An event set when a row is read, a state after two steps, and a fresh loader to restore
    it in (over the watched dataset)."""
    read = threading.Event()
    fresh = jaxload.from_grain(watched_dataset(read), jaxload.data_parallel(),
                               global_batch_size=16, **options)
    return read, state_after_two_steps(), fresh


@pytest.mark.parametrize("prefetch, head_start, reads_early", [
    (2, True, True), (2, False, False), (0, True, False)])
def test_set_state_starts_reading_before_the_first_next(prefetch, head_start, reads_early):
    read, state, fresh = fresh_loader(prefetch=prefetch)
    fresh.get_state()  # its dataset fingerprint (rows 0, 32 and 63) is read once, here
    read.clear()
    fresh.set_state(state, head_start=head_start)
    assert read.wait(timeout=10 if reads_early else 0.5) == reads_early
    assert fresh.get_state()["step"] == 2  # nothing handed out yet
    ids = [np.asarray(b["id"])[[0, -1]].tolist() for b in fresh]
    assert ids == [[32, 47], [48, 63]]
    assert [np.asarray(b["id"])[0] for b in fresh] == [0, 16, 32, 48]  # the next pass: from 0


def test_a_second_set_state_replaces_the_started_pass():
    read, state, fresh = fresh_loader()
    fresh.set_state(state)
    fresh.set_state({**state})
    assert [np.asarray(b["id"])[0] for b in fresh] == [32, 48]


def test_close_stops_a_started_pass():
    read, state, fresh = fresh_loader()
    fresh.set_state(state)
    assert read.wait(timeout=10)
    fresh.close()
    assert [np.asarray(b["id"])[0] for b in fresh] == [0, 16, 32, 48]  # the state was used
