"""The implementation of :mod:`jaxload.metrics` (its public names and documentation are there)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

try:
    from prometheus_client import REGISTRY
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("jaxload.metrics needs prometheus_client: pip install jaxload[metrics]") from e

from jaxload._src.stats import WAIT_BUCKETS_S, Stats

if TYPE_CHECKING:
    from jaxload._src.loader import Loader

LABELS = ["process", "loader"]
_STAGES = ("backend", "agree", "assemble", "check")


class LoaderCollector(Collector):
    """Exports the :class:`~jaxload.Stats` of loaders, read when scraped (a prometheus_client
    custom collector; :func:`register` builds and registers one).

    Example:
      >>> import grain
      >>> from prometheus_client import CollectorRegistry
      >>> ds = grain.MapDataset.range(32).map(lambda i: {"x": i})
      >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16,
      ...                             name="eval")
      >>> registry = CollectorRegistry()
      >>> registry.register(jaxload.metrics.LoaderCollector((loader,)))
      >>> steps = sum(1 for _ in loader)
      >>> registry.get_sample_value("jaxload_steps_total", {"process": "0", "loader": loader.name})
      2.0
    """

    def __init__(self, loaders: tuple[Loader, ...]):
        if not loaders:
            raise ValueError("LoaderCollector needs at least one loader")
        for loader in loaders:
            if not hasattr(loader, "stats") or not hasattr(loader, "name"):
                raise TypeError(f"expected a jaxload.Loader, got {type(loader).__name__}")
        self._loaders = loaders

    def collect(self) -> Iterator[Metric]:
        return iter(families([(loader.name, _own(loader)) for loader in self._loaders]))

    def describe(self) -> list[Metric]:
        return families([])  # the names, without reading any loader at registration


def _own(loader: Loader) -> Stats:
    stats = loader.stats()  # this process's, read without any exchange
    assert isinstance(stats, Stats)
    return stats


def families(stats: list[tuple[str, Stats]]) -> list[Metric]:
    """The metric families of each ``(loader name, stats)``, labelled by process and loader."""
    steps = CounterMetricFamily("jaxload_steps", "Batches handed to the training loop.",
                                labels=LABELS)
    waits = HistogramMetricFamily(
        "jaxload_wait_seconds", "Time the training loop waited for each batch.", labels=LABELS)
    stage = CounterMetricFamily(
        "jaxload_stage_seconds", "Time producing batches, by stage: backend (reading the "
        "pipeline), agree (the step agreement), assemble (global arrays), check.",
        labels=[*LABELS, "stage"])
    rounds = CounterMetricFamily("jaxload_exchanges", "Step-agreement rounds with the "
                                 "coordinator.", labels=LABELS)
    sent = CounterMetricFamily("jaxload_exchange_bytes", "Bytes this process sent the "
                               "coordinator in step-agreement rounds.", labels=LABELS)
    padding = CounterMetricFamily("jaxload_padding_rows", "Rows of padding this process "
                                  "assembled (remainder='pad').", labels=LABELS)
    batch_bytes = CounterMetricFamily("jaxload_batch_bytes", "Bytes of this process's part of "
                                      "the batches handed out.", labels=LABELS)
    share = GaugeMetricFamily("jaxload_wait_share", "Share of the training loop's time spent "
                              "waiting for data (1 - data loading goodput).", labels=LABELS)
    for name, s in stats:
        labels = [str(s.process_index), name]
        steps.add_metric(labels, float(s.steps))
        waits.add_metric(labels, _buckets(s.waits), sum_value=s.wait_s)
        for part in _STAGES:
            stage.add_metric([*labels, part], getattr(s, f"{part}_s"))
        rounds.add_metric(labels, float(s.rounds))
        sent.add_metric(labels, float(s.round_bytes))
        padding.add_metric(labels, float(s.padding_rows))
        batch_bytes.add_metric(labels, float(s.nbytes))
        share.add_metric(labels, s.wait_share)
    return [steps, waits, stage, rounds, sent, padding, batch_bytes, share]


def _buckets(counts: list[int]) -> list[tuple[str, float]]:
    """Cumulative counts per upper bound, as Prometheus histograms have them."""
    bounds = [repr(b) for b in WAIT_BUCKETS_S] + ["+Inf"]
    total, cumulative = 0, []
    for bound, count in zip(bounds, counts, strict=True):
        total += count
        cumulative.append((bound, float(total)))
    return cumulative


def register(*loaders: Loader, registry: Any = None) -> LoaderCollector:
    """Exports ``loaders``' stats from ``registry`` (prometheus_client's default one if None),
    for ``prometheus_client.start_http_server`` or ``generate_latest`` to serve.

    Example:
      >>> import grain
      >>> from prometheus_client import CollectorRegistry
      >>> ds = grain.MapDataset.range(48).map(lambda i: {"x": i})
      >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16,
      ...                             name="pretrain")
      >>> registry = CollectorRegistry()
      >>> collector = jaxload.metrics.register(loader, registry=registry)
      >>> steps = sum(1 for _ in loader)
      >>> labels = {"process": "0", "loader": loader.name}   # its name=, made unique
      >>> registry.get_sample_value("jaxload_wait_seconds_count", labels)
      3.0
    """
    collector = LoaderCollector(loaders)
    (REGISTRY if registry is None else registry).register(collector)
    return collector


__all__ = ["LABELS", "LoaderCollector", "families", "register"]
