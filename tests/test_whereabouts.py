"""Named exchanges and processes out of step, over an in-memory store (threads as processes),
and values read from the store with their fields checked."""

from __future__ import annotations

import json
import time

import pytest
from test_protocol import run_processes

from jaxload._src import protocol, whereabouts, wire
from jaxload._src.agreement import Exchange, PeerFailedError, gather
from jaxload._src.protocol import Report
from jaxload._src.whereabouts import Created, OutOfStepError


def first(reports):
    return "done", True


@pytest.fixture(autouse=True)
def quick_looks(monkeypatch):
    """Waits post and look after 0.3 s instead of 2 s: the same logic, faster tests."""
    monkeypatch.setattr(whereabouts, "SUSPECT_S", 0.3)
    monkeypatch.setattr(whereabouts, "LOOK_EVERY_S", 0.3)


def test_names_come_from_what_they_belong_to():
    created = Created()
    a0 = created.new("loader/train/pass", "loader 'train' pass {ordinal}")
    a1 = created.new("loader/train/pass", "loader 'train' pass {ordinal}")
    b0 = created.new("loader/eval/pass", "loader 'eval' pass {ordinal}")
    assert (a0.prefix, a1.prefix, b0.prefix) == (
        "jaxload/loader/train/pass/0", "jaxload/loader/train/pass/1", "jaxload/loader/eval/pass/0")
    assert a1.what == "loader 'train' pass 1"
    assert created.has("loader/train/pass", 1) and not created.has("loader/train/pass", 2)
    assert not created.has("loader/other/pass", 0)


def test_a_loader_is_named_by_the_line_that_built_it_or_by_its_name():
    here = whereabouts.loader_name(None)
    assert here.startswith("loader@test_whereabouts.py:")
    again = [whereabouts.loader_name(None) for _ in range(2)]  # one line, twice
    assert again[1] == again[0] + "#1"
    assert whereabouts.loader_name("my-train") == "my-train"
    assert whereabouts.loader_name("my-train") == "my-train#1"
    for bad in ("", "a/b", 3):
        with pytest.raises(ValueError, match="name="):
            whereabouts.check_name(bad)


class Announced:
    """The watchdogs of simulated processes: what one announces, the others' waits raise."""

    def __init__(self):
        self.texts: list[tuple[int, str]] = []

    def watch(self, process: int):
        announced = self

        class Watch:
            def interruption(self, exchange):
                theirs = [text for p, text in announced.texts if p != process]
                return PeerFailedError(theirs[0]) if theirs else None

            def out_of_step(self, exchange, error):
                announced.texts.append((process, str(error)))

        return Watch()


@pytest.mark.parametrize("n,alone", [(2, 0), (2, 1), (4, 0), (4, 2)])
def test_an_exchange_of_one_process_only_is_found_within_seconds(n, alone):
    """Process ``alone`` runs an extra exchange the others never create; the others run the
    shared one. Each is blocked waiting for the others: found in seconds, not at timeout_s."""
    registries = [Created() for _ in range(n)]
    announced = Announced()

    def work(t):
        p = t.process_index
        created, watch = registries[p], announced.watch(p)
        if p == alone:
            extra = created.new("loader/loader@demo.py:10/pass", "loader 'demo.py:10' pass 0")
            Exchange(extra, timeout_s=60, transport=t, created=created, watch=watch).round(
                "1", first)
        shared = created.new("loader/loader@demo.py:20/pass", "loader 'demo.py:20' pass 0")
        return Exchange(shared, timeout_s=60, transport=t, created=created,
                        watch=watch).round("1", first)

    start = time.monotonic()
    results, store, _ = run_processes(n, work)
    elapsed = time.monotonic() - start
    assert elapsed < 5, elapsed
    assert all(isinstance(r, (OutOfStepError, PeerFailedError)) for r in results), results
    found = [r for r in results if isinstance(r, OutOfStepError)]
    assert found, results
    text = str(found[0])
    assert "out of step" in text and "demo.py:10" in text and "demo.py:20" in text
    assert "never started" in text and "name=" in text
    assert not [k for k in store.values if k.startswith("jaxload/waiting")]


def test_a_slow_process_is_not_out_of_step():
    """Waiting for a process that is merely late (it reaches the exchange after a few seconds,
    waiting meanwhile in an exchange this process created) is not an error."""
    registries = [Created() for _ in range(2)]

    def work(t):
        created = registries[t.process_index]
        shared = created.new("check@x", "check 'x'")
        later = created.new("loader/b/pass", "loader 'b' pass 0")
        if t.process_index == 1:
            time.sleep(1.5)  # > SUSPECT_S: process 0 posts its wait and looks several times
        out = gather(shared, "1", first, 30, transport=t)
        return out, Exchange(later, timeout_s=30, transport=t, created=created).round("1", first)

    results, store, _ = run_processes(2, work)
    assert results == [("done", "done")] * 2, results
    assert store.values == {}


def test_a_failure_published_to_a_waiting_process_ends_its_wait():
    class Watch:
        def interruption(self, exchange):
            return PeerFailedError("process 1 failed while loading step 3: ValueError: bad")

        def out_of_step(self, exchange, error):
            raise AssertionError("not expected")

    def work(t):
        if t.process_index == 1:
            return None  # never arrives; the watch says why
        return Exchange("x", timeout_s=60, transport=t, watch=Watch()).round("1", first)

    start = time.monotonic()
    results, _, _ = run_processes(2, work)
    assert isinstance(results[0], PeerFailedError) and "ValueError: bad" in str(results[0])
    assert time.monotonic() - start < 5


# -- values read from the store ------------------------------------------------------------
@pytest.mark.parametrize("text,why", [
    ("not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"ready": "2"}', "field 'ready' is '2', not int"),
    ('{"ready": true}', "field 'ready' is True, not int"),
    ('{"surprise": 1}', "unknown field 'surprise'"),
])
def test_a_malformed_report_names_its_key_and_writer(text, why):
    with pytest.raises(wire.MalformedValueError, match="written by process 3") as e:
        protocol.Report.from_json(text, "jaxload/loader/x/pass/0/2/p/3", 3)
    assert why in str(e.value) and "jaxload/loader/x/pass/0/2/p/3" in str(e.value)
    assert Report.from_json('{"ready": 2, "digest": null}', "k", 0) == Report(ready=2)


@pytest.mark.parametrize("at_leader", [False, True])
def test_a_malformed_report_ends_the_round_on_every_process_naming_it(at_leader):
    def work(t):
        exchange = Exchange("x", timeout_s=30, transport=t, at_leader=at_leader)
        report = '{"ready": "lots"}' if t.process_index == 2 else Report(ready=1).to_json()
        return exchange.round(report, lambda r: (json.dumps(len(protocol.parse(r))), True))

    results, store, _ = run_processes(4, work)
    # the process that arrived last decided: it raises the error, the others name it
    (decider,) = [p for p, r in enumerate(results) if isinstance(r, wire.MalformedValueError)]
    assert decider == 0 or not at_leader
    assert "'jaxload/x/0/0/p/2' written by process 2" in str(results[decider])
    for p, r in enumerate(results):
        if p != decider:
            assert isinstance(r, PeerFailedError), r
            assert f"process {decider} could not decide" in str(r), r
            assert "written by process 2" in str(r)
    assert store.values == {}


def test_a_malformed_decision_names_its_key():
    def work(t):
        if t.process_index == 0:
            t.set("jaxload/x/0/0/decision", "?garbage")
            return None
        return Exchange("x", timeout_s=30, transport=t).round("1", first)

    results, _, _ = run_processes(2, work)
    assert isinstance(results[1], wire.MalformedValueError)
    assert "'jaxload/x/0/0/decision' (written by the process that arrived last)" in str(
        results[1])


def test_a_foreign_key_among_the_reports_is_named_on_every_process():
    def work(t):
        if t.process_index == 1:
            t.set("jaxload/x/0/0/p/intruder", "{}")
        return Exchange("x", timeout_s=30, transport=t).round(Report().to_json(), first)

    results, _, _ = run_processes(2, work)
    (decider,) = [p for p, r in enumerate(results) if isinstance(r, wire.MalformedValueError)]
    assert "'jaxload/x/0/0/p/intruder'" in str(results[decider])
    other = results[1 - decider]
    assert isinstance(other, PeerFailedError) and "intruder" in str(other)
