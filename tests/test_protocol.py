"""The step agreement without processes: decide() against fake reports, and the exchange protocol
over an in-memory store with many simulated processes (threads)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from jaxload._src import signature
from jaxload._src.agreement import Exchange, PeerTimeoutError, gather
from jaxload._src.protocol import (
    INFINITE,
    MAX_KNOWN_WINDOW,
    MAX_WINDOW,
    Decision,
    Report,
    decide,
    mismatch_error,
)
from jaxload._src.transport import MemoryStore


def reports(*ready, digest="d1", **fields):
    return {p: Report(ready=n, digest=digest if n else None, **fields) for p, n in enumerate(ready)}


# -- decide ------------------------------------------------------------------------------------
def test_drop_stops_at_the_shortest_and_pad_goes_on_to_the_longest():
    # the processes that had more read ahead are named with what they had beyond the count
    assert decide(reports(4, 2, 4), step=0, window=4, pad=False) == Decision(
        count=2, more=False, window=8, undelivered={"0": 2, "2": 2})
    assert decide(reports(2, 2), step=0, window=4, pad=False).undelivered is None
    padded = decide(reports(4, 2, 3), step=0, window=4, pad=True)
    assert (padded.count, padded.more) == (4, True)


def test_full_windows_go_on_and_the_window_doubles_up_to_its_cap():
    d = decide(reports(8, 8), step=0, window=8, pad=False)
    assert (d.count, d.more, d.window) == (8, True, 16)
    assert decide(reports(16, 16), step=8, window=16, pad=False).window == MAX_WINDOW


def test_large_batches_keep_the_read_ahead_window_small():
    big = {p: Report(ready=4, digest="d", nbytes=100 * 2**20) for p in range(2)}
    assert decide(big, step=0, window=4, pad=False).window == 2  # 256 MiB // 100 MiB


def test_a_failure_wins_over_everything_and_names_the_lowest_failing_process():
    rs = reports(3, 3, 3, 3)
    rs[2] = Report(error="ValueError: bad record", stage="assembling", step=7)
    rs[3] = Report(error="OSError: disk", step=9)
    d = decide(rs, step=6, window=4, pad=True)
    assert d.error == "process 2 failed while assembling step 7: ValueError: bad record"
    assert d.final


def test_a_stop_ends_the_pass_everywhere():
    rs = reports(3, 3)
    rs[1] = Report(stopped=True)
    d = decide(rs, step=0, window=4, pad=False)
    assert d.stopped == 1 and d.final and d.count == 0


def test_differing_signatures_ask_for_a_round_of_full_signatures():
    rs = {0: Report(ready=1, digest="a"), 1: Report(ready=1, digest="b"),
          2: Report(ready=1, digest="a"), 3: Report(ready=0)}
    d = decide(rs, step=0, window=1, pad=False)
    assert d.mismatch == {"a": [0, 2], "b": [1]} and d.more  # not final: one more round
    text = mismatch_error(0, {0: "batch['x']:float32[2]", 1: "batch['x']:float32[3]"}, d.mismatch)
    assert "processes [0, 2]: batch['x']:float32[2]" in text
    assert "processes [1]: batch['x']:float32[3]" in text


def test_known_lengths_fix_the_step_count_in_the_first_round():
    rs = {0: Report(ready=1, digest="d", length=10), 1: Report(ready=1, digest="d", length=7)}
    drop = decide(rs, step=0, window=1, pad=False)
    # no read-ahead once the count is known: the round agrees on every step of the pass, and
    # one more round ends it
    assert (drop.total, drop.count, drop.more) == (7, 7, True)
    assert (drop.undelivered, drop.exact) == ({"0": 3}, True)  # every length known: exactly
    # one length unknown: no count in the first round; at the end, what was read ahead, at least
    mixed = {0: Report(ready=1, digest="d", length=10), 1: Report(ready=1, digest="d")}
    assert decide(mixed, step=0, window=1, pad=False).undelivered is None
    last = decide(reports(4, 1), step=6, window=4, pad=False)
    assert (last.undelivered, last.exact) == ({"0": 3}, False)
    end = decide(reports(0, 0), step=7, window=MAX_KNOWN_WINDOW, pad=False, total=7)
    assert (end.count, end.more) == (0, False)
    assert decide(rs, step=0, window=1, pad=True).total == 10
    assert decide(rs, step=0, window=1, pad=True).undelivered is None  # pad delivers them
    # a longer pass: rounds come MAX_KNOWN_WINDOW steps apart, and only carry failures
    long = {p: Report(ready=1, digest="d", length=MAX_KNOWN_WINDOW + 2) for p in range(2)}
    first = decide(long, step=0, window=1, pad=False)
    assert (first.count, first.more, first.window) == (MAX_KNOWN_WINDOW, True, MAX_KNOWN_WINDOW)
    later = decide(reports(0, 0), step=MAX_KNOWN_WINDOW, window=MAX_KNOWN_WINDOW, pad=False,
                   total=first.total)
    assert (later.count, later.more) == (2, True)
    # a resumed pass: lengths count from the resume point
    assert decide(rs, step=30, window=1, pad=False).total == 37


def test_unknown_or_infinite_lengths():
    rs = {0: Report(ready=1, digest="d", length=10), 1: Report(ready=1, digest="d")}
    assert decide(rs, step=0, window=1, pad=False).total is None
    endless = {p: Report(ready=1, digest="d", length=INFINITE) for p in range(2)}
    d = decide(endless, step=0, window=MAX_KNOWN_WINDOW, pad=False)
    assert (d.total, d.count, d.more) == (INFINITE, MAX_KNOWN_WINDOW, True)
    endless[1] = Report(ready=1, digest="d", length=3)
    assert decide(endless, step=0, window=1, pad=False).total == 3


def test_a_process_without_a_batch_is_sent_a_template_when_it_must_pad():
    rs = {0: Report(ready=2, digest="d"), 1: Report(ready=0, needs_template=True)}
    d = decide(rs, step=0, window=2, pad=True)
    assert (d.count, d.template_from) == (2, 0)
    assert decide(rs, step=0, window=2, pad=False).template_from is None  # drop: no step


def test_reports_and_decisions_are_compact_json():
    report = Report(ready=16, digest="0123456789abcdef", nbytes=3 * 2**20)
    assert len(report.to_json()) < 60
    assert Report.from_json(report.to_json()) == report
    d = Decision(count=16, more=True, window=16)
    assert Decision.from_json(d.to_json()) == d and len(d.to_json()) < 40


# -- signatures --------------------------------------------------------------------------------
def test_the_pad_template_is_json_and_rebuilds_the_structure():
    batch = {"x": np.ones((4, 3), np.float32), "pair": (np.ones(4, np.int8), [np.ones((4, 2))])}
    text = signature.describe(batch)
    zeros = signature.zeros(text, rows=5)
    assert zeros["x"].shape == (5, 3) and zeros["x"].dtype == np.float32
    assert zeros["pair"][0].dtype == np.int8 and isinstance(zeros["pair"][1], list)
    assert zeros["pair"][1][0].shape == (5, 2) and not zeros["x"].any()
    assert zeros["x"].ctypes.data % 64 == 0
    assert signature.readable(text).startswith("batch['x']:float32[3];")


# -- the exchange over many simulated processes ------------------------------------------------
def run_processes(n: int, work, timeout_s: float = 30):
    """``work(transport)`` in ``n`` threads sharing one store; results (or errors) by process."""
    store = MemoryStore()
    transports = store.transports(n)
    results: list = [None] * n

    def run(p):
        try:
            results[p] = work(transports[p])
        except Exception as e:  # the test inspects each process's outcome
            results[p] = e

    threads = [threading.Thread(target=run, args=(p,)) for p in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads)
    return results, store, transports


def minimum(reports):
    return str(min(int(r) for r in reports.values())), False


@pytest.mark.parametrize("n", [1, 2, 64])
def test_every_process_gets_the_leaders_decision_and_nothing_is_left(n):
    def work(t):
        exchange = Exchange("x", timeout_s=10, transport=t)
        out = [exchange.round(str(t.process_index + r), minimum) for r in range(5)]
        out.append(exchange.round("0", lambda reports: ("end", True)))
        return out

    results, store, _ = run_processes(n, work)
    assert all(r == ["0", "1", "2", "3", "4", "end"] for r in results)
    assert store.values == {}  # every round deleted, the last one by the last to leave


def test_coordinator_bytes_grow_linearly_with_the_processes():
    def work(t):
        exchange = Exchange("x", timeout_s=10, transport=t)
        for _ in range(10):
            exchange.round("r" * 60, lambda reports: ("d" * 40, False))
        exchange.leave()

    per_round = {}
    for n in (16, 128):
        _, _, transports = run_processes(n, work)
        per_round[n] = sum(t.sent + t.received for t in transports) / 10
    assert per_round[128] / per_round[16] < 8 * 1.2  # 8x the processes: ~8x the bytes


def test_a_process_that_fails_does_not_wait_and_the_others_learn_it():
    def work(t):
        exchange = Exchange("x", timeout_s=10, transport=t)
        exchange.round("ok", minimum_or_failure)
        failing = t.process_index == 3
        return exchange.round("failed" if failing else "5", minimum_or_failure, ends=failing)

    def minimum_or_failure(reports):
        if "failed" in reports.values():
            return "process 3 failed", True
        return "go on", False

    results, store, _ = run_processes(8, work)
    assert results[3] is None  # returned at once, without the decision
    assert all(r == "process 3 failed" for p, r in enumerate(results) if p != 3)
    assert store.values == {}


def test_a_leader_that_stops_decides_alone_and_at_once():
    def work(t):
        exchange = Exchange("x", timeout_s=10, transport=t)
        if t.process_index == 0:
            time.sleep(0.2)  # the others are already waiting for the decision
            return exchange.round("stop", lambda r: (f"stopped by {list(r)}", True), ends=True)
        return exchange.round("5", lambda r: ("never", True))

    results, store, _ = run_processes(4, work)
    assert results == ["stopped by [0]"] * 4
    assert store.values == {}


def test_a_missing_process_is_named_after_the_timeout():
    def work(t):
        if t.process_index == 2:
            return None  # never arrives
        return Exchange("x", timeout_s=0.5, transport=t).round("1", minimum, where="step 7")

    results, _, _ = run_processes(4, work)
    assert isinstance(results[0], PeerTimeoutError)
    assert "process 0 waited for the other processes at step 7" in str(results[0])
    assert "processes [2] did not arrive" in str(results[0])
    assert isinstance(results[1], PeerTimeoutError)


def test_one_shot_exchanges_leave_nothing():
    results, store, _ = run_processes(16, lambda t: gather(
        "check.0", str(t.process_index), lambda r: (str(len(r)), True), 10, transport=t))
    assert results == ["16"] * 16 and store.values == {}


def test_the_store_stays_small_over_many_rounds():
    """What a long run keeps in the store is bounded: at most two rounds' keys at any time."""
    n, sizes = 8, []

    def work(t):
        exchange = Exchange("long", timeout_s=10, transport=t)
        for _ in range(400):
            exchange.round("1", minimum)
            if t.process_index == 0:
                sizes.append(len(store_of[0].values))
        exchange.leave()

    store_of = []
    store = MemoryStore()
    store_of.append(store)
    transports = store.transports(n)
    threads = [threading.Thread(target=work, args=(t,)) for t in transports]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert len(sizes) == 400 and max(sizes) <= 2 * (n + 3)
    assert store.values == {}
