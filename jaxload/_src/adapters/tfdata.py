"""``from_tf_data``: a tf.data pipeline to a :class:`~jaxload.Loader`, through
:class:`~jaxload._src.pipelines.tf.dataset.TfDataset` or, with ``service=``, the tf.data service.
TensorFlow is imported only when a tf.data pipeline is passed in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jaxload._src import versions
from jaxload._src.config import LoaderConfig
from jaxload._src.defaults import DEFAULT_EXIT_GRACE_S, DEFAULT_TIMEOUT_S
from jaxload._src.input_context import InputContext
from jaxload._src.layout import Layout
from jaxload._src.loader import Loader
from jaxload._src.pipelines.base import Pipeline
from jaxload._src.pipelines.tf.dataset import TfDataset
from jaxload._src.pipelines.tf.service import TfDataService
from jaxload._src.pipelines.tf.split import FUNCTION, OPTIONS
from jaxload._src.remainder import DROP, check_padded_options
from jaxload._src.schedule import from_option


def from_tf_data(
    ds: Any,
    layout: Layout,
    *,
    global_batch_size: int | Sequence[tuple[int, int]],
    shard: bool | str = "auto",
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

    The dataset is split by loading group (processes that need the same rows read the same
    elements): by files where it reads files, so that each group reads and parses only its own
    files; otherwise by elements. Each group's share is batched to ``plan.local_batch_size``
    rows (the incomplete last batch dropped or padded), and each per-process batch becomes one
    global ``jax.Array`` per feature on ``layout.sharding``.

    Args:
      ds: an unbatched ``tf.data.Dataset``; elements are arrays/scalars or dicts, tuples and
        nested structures of them, with fully known shapes and numeric or bool dtypes. Or a
        function ``dataset_fn(ctx)`` (as tf.distribute's ``distribute_datasets_from_function``)
        that returns this loading group's share, given a :class:`~jaxload.InputContext`
        (``ctx.shard_index``, ``ctx.shard_count``, ``ctx.local_batch_size``, ...); batched to
        ``local_batch_size`` already if ``batched=True``.
      layout: where the batches go (``jaxload.data_parallel()``, ...).
      global_batch_size: rows per step over all devices; or a batch-size schedule,
        ``[(first_step, size), ...]`` from step 0 (e.g. ``[(0, 64), (1000, 128)]``): each step's
        batch has that step's size, rows are consumed in order across the changes, and the steps
        count across passes (a second pass goes on with the schedule). Every size is checked
        against the layout before any data: a multiple of its batch shards, or with
        ``remainder="pad"`` of its loading groups (padded then to the batch shards). Not with
        ``batched=True`` or ``service=`` (they batch themselves).
      shard: how ``ds`` is split over the loading groups.

        - ``"auto"`` (the default; ``True`` means the same): by files where ``ds`` reads files
          (``list_files``, ``TFRecordDataset``, ``TextLineDataset``,
          ``FixedLengthRecordDataset``, an ``interleave`` over them) and every op after the
          file reads keeps its meaning on a group's share (``map``, ``filter``, ``shuffle``,
          ``repeat``, ``batch``, ... ; not ``take``, ``skip``, ``zip``, your own ``shard``, ...:
          the tf.data guide lists them): TensorFlow's file sharding rewrite gives group ``k``
          of ``K`` the files ``k, k + K, ...`` before the first op that reads them, and the ops
          stay as written. Otherwise, or with fewer files than groups (a
          :class:`~jaxload.ShardingWarning` names the op or the cause, once), by elements.
        - ``"files"``: by files, or a ValueError here saying why not.
        - ``"elements"``: every process reads every element and keeps ``1/K`` of them
          (``ds.shard(K, k)``); the only split a state can continue on another topology.
        - ``False``: ``ds`` already yields only this loading group's elements; jaxload only
          batches.

        A ``shard(tf.data.experimental.SHARD_HINT, SHARD_HINT)`` placed in ``ds`` is honoured
        (it becomes ``shard(K, k)``). Files of different sizes give the groups different
        numbers of rows: ``remainder="pad"`` still delivers every record once. What feeds the
        split (the whole pipeline by elements, the file names by files, what comes before a
        hint) must give the same order on every process: an unseeded ``shuffle`` or
        ``sample_from_datasets``, a seed only from ``tf.random.set_seed``, or
        ``deterministic=False`` there is refused with a ValueError naming the op, as is anything
        that gives the processes of one loading group other rows. What the graph cannot show
        (a generator's order) is compared in the first round: each process hashes its file
        names, or the pipeline's first elements, and a difference raises a ValueError on every
        process before the first batch. A ``cache(filename)`` gets a file per loading group
        and process.
      remainder: ``"drop"`` (default) ends the epoch on every process at the first step some
        process cannot fill; ``"pad"`` goes on until every process is exhausted, zero-fills the
        missing rows and adds a bool ``"mask"`` feature (dict elements only). See
        :mod:`jaxload._src.remainder`.
      batched: ``True`` if ``ds`` already yields per-process batches of
        ``plan.local_batch_size`` rows (``ds.batch(plan.local_batch_size,
        drop_remainder=True)`` with ``remainder="drop"``; with ``"pad"``, ``drop_remainder=False``
        keeps each group's last rows, padded); a different static leading dim is refused before
        any data is read; with ``"pad"`` a shorter batch that is not the last is padded, with a
        warning. With ``shard=True`` whole
        batches are then dealt out to the loading groups.
      checks: when to verify placement at run time: ``"first"`` step of each pass (default),
        every N steps (an int), or ``"never"``. See :class:`~jaxload.Loader`. Unless
        ``"never"``, a pipeline split by elements also proves at every step that every
        process read the same elements before the split (a digest of each global batch
        compared in the step agreement; not under a batch-size schedule), and a loading group
        of several processes that its processes read the same rows.
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
        rows on every member. See :meth:`jaxload.Layout.load_once_plan` and the guide
        docs/guides/layouts.md (when to choose it).
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

    Resuming: a seeded ``shuffle`` over an in-memory source or over file names, and an
    in-memory source without one, are positioned by replay: a state of a few counts, nothing
    saved as a pass runs. Otherwise ``loader.get_state()`` holds tf.data's own checkpoint of
    this group's iterator. Where every op supports it, it is symbolic (positions only: a
    parallel ``interleave`` keeping its order is then rebuilt as a sequential one whose open
    inputs each read ahead on their own thread, the same elements in the same order), saved
    whenever the reading thread's time since the last save reaches 100 times a save's cost (at
    most 1% of its time), and ``set_state`` on the same plan restores it and reads the few
    batches after that save again, nothing before it. Where it holds buffers (a shuffle that is
    not replayed), ``get_state`` takes it when called, with the batches read ahead of the loop,
    which a resume hands out first; ``jaxload.checkpoint`` writes those bytes beside the
    state's JSON. Sharded by elements, a
    state also continues on another topology at its global row (``ds.skip(rows).shard(K, k)``;
    see :mod:`jaxload._src.state`); sharded by files it continues on the same topology only,
    and ``set_state`` says so on every process.
    """
    import tensorflow as tf

    versions.check("tensorflow")  # a warning, once, where it is not a tested release
    check_shard(shard, service)
    if callable(ds) and not isinstance(ds, tf.data.Dataset):
        return _from_function(ds, layout, global_batch_size, batched=batched, shard=shard,
                              remainder=remainder, checks=checks, prefetch=prefetch,
                              timeout_s=timeout_s, on_failure=on_failure,
                              exit_grace_s=exit_grace_s, name=name, load_once=load_once,
                              record=record, service=service)
    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(f"from_tf_data expects a tf.data.Dataset or a function dataset_fn(ctx) "
                        f"returning one, got {type(ds).__name__}")
    # the service hands each element to one process: each loads its own rows (load_once)
    config = LoaderConfig(remainder=remainder, checks=checks, prefetch=prefetch,
                          timeout_s=timeout_s, on_failure=on_failure, exit_grace_s=exit_grace_s,
                          name=name, record=record, load_once=load_once or service is not None,
                          batched=batched)
    size, plan, schedule = from_option(
        global_batch_size, lambda size: config.plan(layout, size),
        "service=" if service is not None else "batched=True" if batched else None)
    if plan.global_batch_size != size:
        check_padded_options(shard is not False, batched,
                             "service=" if service is not None else None)
    pipeline: Pipeline
    if service is not None:
        pipeline = TfDataService(ds, plan, service=service, shard=shard is not False,
                                 batched=batched,
                                 remainder=remainder, timeout_s=timeout_s, name=name)
    else:
        pipeline = TfDataset(ds, plan, global_batch_size=size, shard=shard,
                             batched=batched, remainder=remainder,
                             prove=config.check_period > 0 and schedule is None)
    return Loader(pipeline, layout, plan, config, schedule)


def check_shard(shard: Any, service: str | None) -> None:
    """``shard=`` is True/False or one of :data:`OPTIONS`; with ``service=`` a bool."""
    if shard is True or shard is False or shard == "auto" or (
            shard in OPTIONS and service is None):
        return
    if service is not None and shard in OPTIONS:
        raise ValueError(f"shard={shard!r} cannot be used with service=: the tf.data service "
                         "hands each element to one process; pass shard=True or False")
    raise ValueError(f"shard={shard!r} must be 'auto' (the default; True is the same), 'files', "
                     "'elements' or False")


def _from_function(dataset_fn: Callable[[InputContext], Any], layout: Layout,
                   global_batch_size: Any, **options: Any) -> Loader:
    """``from_tf_data(dataset_fn, ...)``: the plan first, then ``dataset_fn(ctx)`` as this
    loading group's share."""
    import tensorflow as tf

    if options["shard"] not in (True, "auto") or options["service"] is not None:
        raise ValueError("from_tf_data(dataset_fn, ...) takes what dataset_fn returns as this "
                         "loading group's share: leave shard= and service= unset")
    config = LoaderConfig(remainder=options["remainder"], checks=options["checks"],
                          prefetch=options["prefetch"], timeout_s=options["timeout_s"],
                          on_failure=options["on_failure"], exit_grace_s=options["exit_grace_s"],
                          name=options["name"], record=options["record"],
                          load_once=options["load_once"], batched=options["batched"])
    size, plan, schedule = from_option(
        global_batch_size, lambda size: config.plan(layout, size),
        "batched=True" if options["batched"] else None)
    if plan.global_batch_size != size:
        check_padded_options(True, options["batched"], "dataset_fn")
    ds = dataset_fn(InputContext.of(plan))
    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(f"dataset_fn returned a {type(ds).__name__}; it must return this loading "
                        "group's tf.data.Dataset")
    pipeline = TfDataset(ds, plan, global_batch_size=size, shard=FUNCTION,
                         batched=options["batched"], remainder=options["remainder"])
    return Loader(pipeline, layout, plan, config, schedule)
