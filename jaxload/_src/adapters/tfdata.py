"""tf.data adapter. TensorFlow is imported only when a tf.data pipeline is passed in."""

from __future__ import annotations

import itertools
from typing import Any

import jax

from jaxload._src import agreement, whereabouts
from jaxload._src.assemble import leaf_name
from jaxload._src.layouts import Layout
from jaxload._src.loader import DEFAULT_TIMEOUT_S, Loader, check_options, loading_plan
from jaxload._src.passes import Source
from jaxload._src.protocol import INFINITE
from jaxload._src.remainder import DROP, check_padded_options, padded_batch_size, rows_read
from jaxload._src.state import Elastic, why_not_sliceable
from jaxload._src.watchdog import DEFAULT_EXIT_GRACE_S, check_on_failure

# Batches a process requests from the service ahead of its reads. The service gives each batch
# to whichever process asks first, so a process that read far ahead would take the others'
# share; with few requests in flight the processes, which read in lockstep, get even shares.
_SERVICE_REQUESTS = 2


def from_tf_data(
    ds: Any,
    layout: Layout,
    *,
    global_batch_size: int,
    shard: bool = True,
    remainder: str = DROP,
    batched: bool = False,
    checks: str | int = "first",
    prefetch: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_failure: str = "exit",
    exit_grace_s: float = DEFAULT_EXIT_GRACE_S,
    name: str | None = None,
    load_once: bool = False,
    record: str | None = None,
    service: str | None = None,
) -> Loader:
    """A :class:`~jaxload.Loader` of global batches from an unbatched ``tf.data.Dataset``.

    The dataset is sharded by loading group (``ds.shard(plan.shard_count, plan.shard_index)``:
    processes that need the same rows read the same elements), batched to
    ``plan.local_batch_size`` rows (the incomplete last batch dropped or padded), and each per-process
    batch becomes one global ``jax.Array`` per feature on ``layout.sharding``.

    Args:
      ds: an unbatched ``tf.data.Dataset``; elements are arrays/scalars or dicts, tuples and
        nested structures of them, with fully known shapes and numeric or bool dtypes.
      layout: where the batches go (``jaxload.data_parallel()``, ...).
      global_batch_size: rows per step over all devices.
      shard: ``False`` if ``ds`` already yields only this loading group's elements (for example
        you sharded files yourself by ``layout.plan(...).shard_index``); jaxload then only
        batches. Sharding here reads and skips the other groups' elements, so for large
        file-based inputs shard the file list instead.
      remainder: ``"drop"`` (default) ends the epoch on every process at the first step some
        process cannot fill; ``"pad"`` goes on until every process is exhausted, zero-fills the
        missing rows and adds a bool ``"mask"`` feature (dict elements only). See
        :mod:`jaxload._src.remainder`.
      batched: ``True`` if ``ds`` already yields per-process batches of
        ``plan.local_batch_size`` rows (e.g. from ``ds.batch(..., drop_remainder=True)``); a
        different leading dim is refused before any data is read. With ``shard=True`` whole
        batches are then dealt out to the loading groups.
      checks: when to verify placement at run time: ``"first"`` step of each pass (default),
        every N steps (an int), or ``"never"``. See :class:`~jaxload.Loader`.
      prefetch: global batches assembled ahead on a background thread while the training step
        runs (default 2; 0 turns it off).
      timeout_s: how long a process waits for the others at each step before raising, and
        how long its pipeline may take to produce one batch (the first batch of a pass:
        3 x ``timeout_s``) before the pipeline counts as stuck, a failure that names the
        stack it is stuck in.
      on_failure: what each process does when a pass fails on any process: ``"exit"``
        (default) or ``"raise"``; see :class:`~jaxload.Loader`.
      exit_grace_s: with ``on_failure="exit"``, the seconds after which a process still running
        once it learned of the failure ends (it may be inside a collective that never completes).
      name: names the loader's exchanges between processes; see :class:`~jaxload.Loader`.
      load_once: ``True`` to load each row on one process only and reach the layout's
        sharding with a jitted reshard on device (the guide's Option 4); matters only where a
        model replica spans processes, whose loading groups would otherwise each read their
        rows on every member. See :meth:`jaxload.Layout.load_once_plan` and the README.
      service: the address of a tf.data service dispatcher (``"grpc://host:port"``) to run the
        pipeline and its batching on the service's workers instead of this host's CPUs. All
        processes read one shared job per pass (``distributed_epoch``: the service hands each
        element to exactly one process), so each process loads its own rows as with
        ``load_once=True`` and the layout's replicas are filled by the reshard on device:
        processes of one loading group hold identical rows, different groups disjoint ones.
        The service's order is not deterministic, so such a loader cannot ``set_state``; with
        ``remainder="drop"`` each worker also drops its last incomplete batch of an epoch.
      record: a top-level feature (e.g. ``"id"``) whose values in each step's batch the
        loader notes on the host, per loading group: see :meth:`jaxload.Loader.records`.

    Example:
      >>> import tensorflow as tf
      >>> ds = tf.data.Dataset.range(1024).map(lambda i: {"x": tf.cast(i, tf.float32)})
      >>> loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=128)
      >>> next(iter(loader))["x"].shape
      (128,)

    Resuming: ``loader.get_state()`` / ``set_state`` continue exactly on the same plan, and on
    another topology at the state's global row (``ds.skip(rows).shard(K, k)``) when jaxload
    shards the unbatched dataset (see :mod:`jaxload._src.state`).
    """
    import tensorflow as tf

    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(f"from_tf_data expects a tf.data.Dataset, got {type(ds).__name__}")
    check_options(remainder, checks, prefetch)
    check_on_failure(on_failure, exit_grace_s)
    whereabouts.check_name(name)
    physical = padded_batch_size(layout, global_batch_size, remainder)
    plan = loading_plan(layout, physical, load_once or service is not None)
    if physical != global_batch_size:
        check_padded_options(shard, batched, "service=" if service is not None else None)
    if service is not None:
        _check_service_options(service, shard, batched)
    _check_element_spec(ds.element_spec, plan.local_batch_size if batched else None, remainder)

    def spec():  # a per-process batch's leaves, from the element spec (no data read)
        return _batch_spec(ds.element_spec, plan.local_batch_size, batched)
    if service is not None:
        return Loader(_service_batches(ds, service, plan.local_batch_size, remainder, timeout_s,
                                       name),
                      layout, plan, backend="tf.data service", remainder=remainder, checks=checks,
                      prefetch=prefetch, timeout_s=timeout_s, on_failure=on_failure,
                      exit_grace_s=exit_grace_s, name=name, spec=spec,
                      not_resumable="the tf.data service hands out elements in no fixed order, so "
                      "no position names the elements still to come; to resume (also on another "
                      "topology), load without service=", record=record)

    def from_row(start: int):
        """This group's batches from global row ``start`` on, resuming after ``consumed``
        batches (skip-by-count: exact for a deterministic pipeline; skipped elements are read)."""
        group = _from_row(ds, start, plan, shard, global_batch_size)
        # elements, unless they are batches already (batched=True, a padded batch's real rows)
        unbatched = physical == global_batch_size and not batched

        def local_batches(consumed: int | None):
            consumed = consumed or 0
            elements = plan.local_batch_size if unbatched else 1
            pipeline = group.skip(consumed * elements) if consumed else group
            if unbatched:
                pipeline = pipeline.batch(plan.local_batch_size, drop_remainder=remainder == DROP)
            batches = pipeline.prefetch(tf.data.AUTOTUNE)
            return Source(zip(batches.as_numpy_iterator(), itertools.count(consumed + 1)),
                          length=_length(batches))

        return local_batches

    length = int(ds.cardinality())
    why_not = why_not_sliceable(shard, batched, "the whole dataset")
    elastic = Elastic(from_row=None if why_not else from_row, why_not=why_not,
                      length=length if length >= 0 else None, rows_per_step=global_batch_size)
    return Loader(from_row(0), layout, plan, backend="tf.data", remainder=remainder,
                  checks=checks, prefetch=prefetch, timeout_s=timeout_s, on_failure=on_failure,
                  exit_grace_s=exit_grace_s, name=name, record=record, elastic=elastic,
                  spec=spec)


def _from_row(ds: Any, start: int, plan: Any, shard: bool, global_batch_size: int) -> Any:
    """This loading group's share of the dataset's global order from row ``start`` on:
    ``ds.skip(start).shard(K, k)``, or with a padded global batch its real rows of each step,
    as batches. With ``shard=False`` (``start`` is 0), ``ds`` itself."""
    if not shard:
        return ds
    rest = ds.skip(start) if start else ds
    if plan.global_batch_size != global_batch_size:
        return _real_rows(rest, global_batch_size, plan)
    return rest.shard(plan.shard_count, plan.shard_index)


def _real_rows(ds: Any, global_batch_size: int, plan: Any) -> Any:
    """Batches of this group's real rows when the global batch is padded: of every
    ``global_batch_size`` elements, the ones at this group's rows (none for a group of padding).
    """
    import tensorflow as tf

    start, rows = plan.global_rows[0], rows_read(plan, global_batch_size)
    if not rows:
        return ds.take(0).batch(1)
    share = ds.batch(global_batch_size).map(
        lambda b: tf.nest.map_structure(lambda x: x[start : start + rows], b))
    return share.filter(lambda b: tf.shape(tf.nest.flatten(b)[0])[0] > 0)


def _length(ds: Any) -> int | None:
    """The batches a pipeline holds, where tf.data knows it (``INFINITE`` after repeat())."""
    import tensorflow as tf

    n = int(ds.cardinality())
    if n == int(tf.data.INFINITE_CARDINALITY):
        return INFINITE
    return n if n >= 0 else None


def _service_batches(ds: Any, service: str, rows: int, remainder: str, timeout_s: float,
                     name: str | None):
    """Per-process batches from a tf.data service job that all processes share, one per pass.

    The job name must be the same on every process and new for every pass (a finished job of
    the same name would yield nothing), and new for every run against a long-lived dispatcher.
    """
    import tensorflow as tf

    run = agreement.shared_token(whereabouts.one_off("tfdata-service", name), timeout_s)
    passes = itertools.count()
    # batching on the workers: one RPC per batch, not per element
    batched = ds.batch(rows, drop_remainder=remainder == DROP)

    def local_batches(position: None):
        job = f"jaxload-{run}-{next(passes)}"
        pipeline = batched.apply(tf.data.experimental.service.distribute(
            processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC,
            service=service, job_name=job, max_outstanding_requests=_SERVICE_REQUESTS))
        return zip(pipeline.as_numpy_iterator(), itertools.repeat(None))

    return local_batches


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


def _batch_spec(element_spec: Any, rows: int, batched: bool) -> Any:
    """A per-process batch of ``rows`` rows as ``jax.ShapeDtypeStruct`` leaves."""
    return jax.tree_util.tree_map(
        lambda s: jax.ShapeDtypeStruct((rows, *(s.shape[1:] if batched else s.shape)),
                                       s.dtype.as_numpy_dtype), element_spec)


def _check_element_spec(element_spec: Any, batch_rows: int | None, remainder: str) -> None:
    """Rejects, before any data is read, features that cannot form a static-shape jax.Array.

    ``batch_rows``: the leading dim every feature must have if the elements are batches already.
    """
    import tensorflow as tf

    for path, spec in jax.tree_util.tree_flatten_with_path(element_spec)[0]:
        name = leaf_name(path)
        if not isinstance(spec, tf.TensorSpec):
            raise TypeError(
                f"feature {name} is a {type(spec).__name__}; only dense tensors can be loaded "
                "(convert ragged/sparse features to dense in the pipeline)"
            )
        if spec.dtype in (tf.string, tf.variant, tf.resource):
            raise TypeError(
                f"feature {name} has dtype {spec.dtype.name}; only numeric and bool features can "
                "be loaded into jax.Arrays. Decode or drop it in the pipeline."
            )
        if batch_rows is not None:
            leading = spec.shape[0] if spec.shape.rank else "no leading dim"
            if leading != batch_rows and not (leading is None and remainder != DROP):
                raise ValueError(
                    f"feature {name} of the already-batched dataset has shape {spec.shape}; "
                    f"with batched=True its leading dim must be local_batch_size={batch_rows} "
                    "(batch with drop_remainder=True), or pass the unbatched dataset."
                )
            spec = tf.TensorSpec(spec.shape[1:], spec.dtype)
        if not spec.shape.is_fully_defined():
            raise ValueError(
                f"feature {name} has shape {spec.shape} with unknown dimensions; jax.Arrays need "
                "static shapes. Pad or crop it to a fixed shape in the pipeline (e.g. "
                "tf.ensure_shape after padding)."
            )
