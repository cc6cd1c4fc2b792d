"""jaxload.metrics: each process's loader stats scraped as Prometheus text, in real processes; the
counters are checked in the parent against the steps each process took."""

from __future__ import annotations

import numpy as np
import pytest

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ELEMENTS, GLOBAL_BATCH = 40, 16  # data parallel on 2 processes: 20 each, 8 per step


def scrape_after(steps_to_take: int | None):
    """Worker side: a padded pass (all of it, or ``steps_to_take`` steps), then one scrape."""
    import grain
    from prometheus_client import CollectorRegistry, generate_latest

    import jaxload.metrics

    ds = grain.MapDataset.range(ELEMENTS).map(lambda i: {"x": np.full(3, i, np.float32)})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=GLOBAL_BATCH,
                                remainder="pad", name="train")
    registry = CollectorRegistry()
    jaxload.metrics.register(loader, registry=registry)
    before = generate_latest(registry).decode()
    taken = 0
    with iter(loader) as batches:
        for _ in batches:
            taken += 1
            if taken == steps_to_take:
                break
    return dict(before=before, after=generate_latest(registry).decode(), taken=taken,
                stats=loader.stats().as_dict())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(scraped, name: str, process: int, **labels: str) -> float:
    key = tuple(sorted({"process": str(process), "loader": "train", **labels}.items()))
    return scraped[(name, key)]


@pytest.mark.cluster
def test_a_scrape_of_every_process_matches_the_steps_taken(clusters):
    results = clusters.run(scrape_after, num_processes=2, local_devices=2, args=(None,),
                           timeout_s=120)
    for p, r in enumerate(results):
        assert r["taken"] == 3  # 20 rows per process: 8, 8, then 4 real rows and 4 padding
        before, after = samples(r["before"]), samples(r["after"])
        assert value(before, "jaxload_steps_total", p) == 0
        assert value(after, "jaxload_steps_total", p) == 3
        # one wait per step, in the histogram's count, its +Inf bucket and its sum
        assert value(after, "jaxload_wait_seconds_count", p) == 3
        assert value(after, "jaxload_wait_seconds_bucket", p, le="+Inf") == 3
        assert value(after, "jaxload_wait_seconds_sum", p) == pytest.approx(r["stats"]["wait_s"])
        assert value(after, "jaxload_padding_rows_total", p) == 4
        assert value(after, "jaxload_batch_bytes_total", p) == 3 * 8 * 3 * 4 + 3 * 8  # + mask
        rounds = value(after, "jaxload_exchanges_total", p)
        assert rounds == r["stats"]["rounds"] >= 1
        assert value(after, "jaxload_exchange_bytes_total", p) >= 20 * rounds
        for stage in ("backend", "agree", "assemble"):
            assert value(after, "jaxload_stage_seconds_total", p, stage=stage) > 0
        assert 0 <= value(after, "jaxload_wait_share", p) <= 1
        # each process exports its own series only
        assert {dict(k[1]).get("process") for k in after} == {str(p)}


@pytest.mark.cluster
def test_a_pass_stopped_early_counts_the_steps_handed_out(clusters):
    results = clusters.run(scrape_after, num_processes=2, local_devices=2, args=(2,),
                           timeout_s=120)
    for p, r in enumerate(results):
        after = samples(r["after"])
        assert r["taken"] == 2
        assert value(after, "jaxload_steps_total", p) == 2
        assert value(after, "jaxload_wait_seconds_count", p) == 2


def test_buckets_are_cumulative_and_end_at_inf():
    from jaxload._src.metrics import families
    from jaxload._src.stats import WAIT_BUCKETS_S, Stats

    stats = Stats(process_index=3)
    for seconds in (0.00005, 0.005, 0.005, 50.0):
        stats.waited(seconds)
    scraped = {(s.name, s.labels.get("le")): s.value
               for f in families([("l", stats)]) for s in f.samples
               if s.name == "jaxload_wait_seconds_bucket"}
    bounds = [repr(b) for b in WAIT_BUCKETS_S] + ["+Inf"]
    assert [scraped[("jaxload_wait_seconds_bucket", b)] for b in bounds] == [1, 1, 3, 3, 3, 3, 4]
    assert stats.wait_s == pytest.approx(50.01005)


def test_register_refuses_what_is_not_a_loader():
    import jaxload.metrics

    with pytest.raises(TypeError, match="expected a jaxload.Loader, got int"):
        jaxload.metrics.register(3, registry=prometheus_client.CollectorRegistry())
    with pytest.raises(ValueError, match="at least one loader"):
        jaxload.metrics.register(registry=prometheus_client.CollectorRegistry())
