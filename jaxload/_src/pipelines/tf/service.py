"""The tf.data service: one job shared by all processes per pass, batched on its workers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from jaxload._src import agreement, whereabouts
from jaxload._src.pipelines.base import LocalSpec
from jaxload._src.pipelines.tf.iterator import counted
from jaxload._src.pipelines.tf.spec import batch_spec, check_element_spec
from jaxload._src.plan import Plan
from jaxload._src.remainder import DROP
from jaxload._src.state import NOT_ELASTIC, Elastic
from jaxload._src.trees import HostBatch

# Batches a process requests from the service ahead of its reads. The service gives each batch
# to whichever process asks first, so a process that read far ahead would take the others'
# share; with few requests in flight the processes, which read in lockstep, get even shares.
_SERVICE_REQUESTS = 2


class TfDataService:
    """Per-process batches from a tf.data service job that all processes share, one per pass
    (``distributed_epoch``: each element goes to exactly one process). Its order is not
    deterministic: it has no position, so it cannot resume; it reads nothing by index."""

    backend: str = "tf.data service"
    by_index: bool = False
    elastic: Elastic = NOT_ELASTIC
    not_resumable: str | None = ("the tf.data service hands out elements in no fixed order, so no position "
                     "names the elements still to come; to resume (also on another topology), "
                     "load without service=")

    def __init__(self, ds: Any, plan: Plan, *, service: Any, shard: bool, batched: bool,
                 remainder: str, timeout_s: float, name: str | None):
        _check_service_options(service, shard, batched)
        check_element_spec(ds, None, remainder)
        self._service, self._element_spec = service, ds.element_spec
        self._rows = plan.local_batch_size
        # the job's name: the same on every process, new for every run and every pass (a
        # finished job of the same name would yield nothing)
        self._run = agreement.shared_token(whereabouts.one_off("tfdata-service", name), timeout_s)
        self._passes = itertools.count()
        # batching on the workers: one RPC per batch, not per element
        self._batched = ds.batch(plan.local_batch_size, drop_remainder=remainder == DROP)

    def spec(self) -> LocalSpec:
        return batch_spec(self._element_spec, self._rows, batched=False)

    def batches(self, position: None) -> Iterator[tuple[HostBatch, None]]:
        import tensorflow as tf

        job = f"jaxload-{self._run}-{next(self._passes)}"
        service = tf.data.experimental.service
        pipeline = self._batched.apply(service.distribute(
            processing_mode=service.ShardingPolicy.DYNAMIC, service=self._service, job_name=job,
            max_outstanding_requests=_SERVICE_REQUESTS))
        return counted(pipeline, itertools.repeat(None))


def _check_service_options(service: Any, shard: bool, batched: bool) -> None:
    if not isinstance(service, str) or not service:
        raise TypeError(f"service must be a dispatcher address like 'grpc://host:port', got "
                        f"{service!r}")
    if not shard:
        raise ValueError("service= shares one job among all processes, which splits the data "
                         "itself; pass the whole dataset with shard=True (the default)")
    if batched:
        raise ValueError("service= batches on the service's workers; pass the unbatched dataset "
                         "(batched=False)")
