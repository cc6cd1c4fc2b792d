"""Loader stats as Prometheus metrics, for a monitoring system to scrape from every process.

``register(loader)`` adds a collector to prometheus_client's registry (or ``registry=``); each
scrape reads the loaders' :meth:`~jaxload.Loader.stats` of this process, without any exchange
with the other processes, so a scrape never waits on them. Every series is labelled with
``process`` (the JAX process index) and ``loader`` (its ``name=``, with ``#k`` for the k-th
loader of the same name on the process: ``Loader.name``):

- ``jaxload_steps_total``: batches handed to the training loop;
- ``jaxload_wait_seconds``: a histogram of the time the loop waited for each batch;
- ``jaxload_wait_share``: the share of the loop's time spent waiting for data (one minus the
  data loading's goodput, as :attr:`jaxload.Stats.wait_share`);
- ``jaxload_stage_seconds_total{stage=...}``: time reading the pipeline (``backend``), in the
  step agreement (``agree``), assembling global arrays (``assemble``) and checking (``check``);
- ``jaxload_exchanges_total`` and ``jaxload_exchange_bytes_total``: step-agreement rounds with
  the coordinator, and the bytes this process sent in them;
- ``jaxload_padding_rows_total``: rows of padding (``remainder="pad"``);
- ``jaxload_batch_bytes_total``: bytes of this process's part of the batches.

Serve them as any Prometheus client does, e.g. ``prometheus_client.start_http_server(9100)``
on every process. Importing this module imports ``prometheus_client`` (``pip install
jaxload[metrics]``); ``import jaxload`` alone does not.

Example:
  >>> import grain
  >>> import jaxload.metrics
  >>> from prometheus_client import CollectorRegistry, generate_latest
  >>> ds = grain.MapDataset.range(40).map(lambda i: {"x": i})
  >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16,
  ...                             remainder="pad", name="train")
  >>> registry = CollectorRegistry()
  >>> collector = jaxload.metrics.register(loader, registry=registry)
  >>> for batch in loader:
  ...     pass                                      # the training step
  >>> text = generate_latest(registry).decode()   # what a scrape of this process reads
  >>> labels = {"process": "0", "loader": loader.name}
  >>> for name in ("jaxload_steps_total", "jaxload_wait_seconds_count",
  ...              "jaxload_padding_rows_total"):
  ...     print(name, registry.get_sample_value(name, labels))
  jaxload_steps_total 3.0
  jaxload_wait_seconds_count 3.0
  jaxload_padding_rows_total 8.0
"""

from jaxload._src import exports
from jaxload._src.metrics import LoaderCollector, register

__all__ = (
    "LoaderCollector",
    "register",
)

exports.claim(__name__, globals(), __all__)
