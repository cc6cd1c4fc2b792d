"""``from_grain``: a Grain dataset to a :class:`~jaxload.Loader`, through the pipeline class of
its kind (:mod:`jaxload._src.pipelines`). Grain is imported only when a Grain dataset is passed in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxload._src import versions
from jaxload._src.config import LoaderConfig
from jaxload._src.defaults import DEFAULT_EXIT_GRACE_S, DEFAULT_TIMEOUT_S
from jaxload._src.layout import Layout
from jaxload._src.loader import Loader
from jaxload._src.pipelines.base import Pipeline
from jaxload._src.pipelines.grain.data_loader import GrainDataLoader
from jaxload._src.pipelines.grain.iter_dataset import GrainIterDataset
from jaxload._src.pipelines.grain.map_dataset import GrainMapDataset
from jaxload._src.remainder import DROP, check_padded_options
from jaxload._src.schedule import from_option


def from_grain(
    ds: Any,
    layout: Layout,
    *,
    global_batch_size: int | Sequence[tuple[int, int]],
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
    read_options: Any = None,
) -> Loader:
    """A :class:`~jaxload.Loader` of global batches from an unbatched Grain dataset.

    A ``grain.MapDataset`` is sharded by loading group (``ds[plan.shard_index::plan.shard_count]``:
    processes that need the same rows read the same elements), batched on the ``MapDataset`` to
    ``plan.local_batch_size`` rows (the incomplete last batch dropped or padded), and each
    per-process batch becomes one global ``jax.Array`` per feature on ``layout.sharding``. The
    batches are read by index on the loader's own thread, with no thread pool, and the position
    saved by ``get_state`` is the next batch's index. (A ``MapDataset`` with a ``filter`` cannot
    be batched by index; it is read through ``to_iter_dataset`` and batched there. Over several
    loading groups each filters its own share, so the groups keep different numbers of rows:
    ``remainder="pad"`` delivers every kept row once. A padded global batch refuses it.) Each
    pass's first round compares the dataset between processes (its length and a hash of a few
    elements): every process must pass the same one.

    Args:
      ds: an unbatched ``grain.MapDataset`` or ``grain.IterDataset``.
        Elements are numpy arrays/scalars or dicts, tuples and nested structures of them. Or a
        ``grain.DataLoader`` (any ``worker_count``) that shards and batches itself: jaxload
        then checks that its sampler shards by this process's loading group (use
        :func:`grain_shard_options`) and that it batches ``plan.local_batch_size`` rows.
      layout: where the batches go (``jaxload.data_parallel()``, ...).
      global_batch_size: rows per step over all devices; or a batch-size schedule,
        ``[(first_step, size), ...]`` from step 0 (e.g. ``[(0, 64), (1000, 128)]``): each step's
        batch has that step's size, rows are consumed in order across the changes, and the steps
        count across passes (a second pass goes on with the schedule). Every size is checked
        against the layout before any data: a multiple of its batch shards, or with
        ``remainder="pad"`` of its loading groups (padded then to the batch shards). Not with
        ``batched=True`` or a ``grain.DataLoader`` (they batch themselves).
      shard: ``False`` if ``ds`` already holds only this loading group's elements; jaxload then
        only batches. An ``IterDataset`` cannot be read by index: with ``shard=True`` every
        process reads all of it and keeps ``1/K`` of its elements (a warning says so once);
        to read only each group's share, shard its source ``MapDataset`` first
        (``source[plan.shard_index::plan.shard_count]``) and pass ``shard=False``.
      remainder: ``"drop"`` (default) ends the epoch on every process at the first step some
        process cannot fill; ``"pad"`` goes on until every process is exhausted, zero-fills the
        missing rows and adds a bool ``"mask"`` feature (dict elements only). See
        :mod:`jaxload._src.remainder`.
      batched: ``True`` if ``ds`` already yields per-process batches of
        ``plan.local_batch_size`` rows, all but the last; a batch with another leading
        dim is refused before any device work, but with ``"pad"`` a shorter one is padded
        (with a warning where it is not the last).
        With ``shard=True`` whole batches are then dealt out to the loading groups.
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
        rows on every member. See :meth:`jaxload.Layout.load_once_plan` and the guide
        docs/guides/layouts.md (when to choose it).
      record: a top-level feature (e.g. ``"id"``) whose values in each step's batch the
        loader notes on the host, per loading group: see :meth:`jaxload.Loader.records`.
      read_options: a ``grain.ReadOptions`` to read a ``MapDataset``'s batches with Grain's
        thread pool (``batched.to_iter_dataset(read_options)``: each thread builds whole
        batches). Threads help when each element costs real CPU time in Python code that
        releases the GIL (decoding, augmenting with numpy) and there are cores to spare; they
        cost time when elements are cheap or cores few, which is why the default (None) reads
        by index without threads. Example: ``grain.ReadOptions(num_threads=8,
        prefetch_buffer_size=16)``.


    Example:
      >>> import grain
      >>> ds = grain.MapDataset.range(1024).map(lambda i: {"x": np.float32(i)})
      >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=128)
      >>> next(iter(loader))["x"].shape
      (128,)

      A batch-size schedule: 128 rows at steps 0 and 1, then 256:

      >>> ramp = jaxload.from_grain(ds, jaxload.data_parallel(),
      ...                           global_batch_size=[(0, 128), (2, 256)])
      >>> [batch["x"].shape[0] for batch in ramp]
      [128, 128, 256, 256, 256]

    Resuming: ``loader.get_state()`` / ``set_state`` continue exactly on the same plan, and on
    another topology at the state's global row (``ds[rows:][k::K]``) for a sharded, unbatched
    MapDataset, or a DataLoader where its sampler allows it (see :mod:`jaxload._src.state`).
    """
    import grain

    versions.check("grain")  # a warning, once, where it is not a tested release
    config = LoaderConfig(remainder=remainder, checks=checks, prefetch=prefetch,
                          timeout_s=timeout_s, on_failure=on_failure, exit_grace_s=exit_grace_s,
                          name=name, record=record, load_once=load_once,
                          batched=batched or isinstance(ds, grain.DataLoader))
    if read_options is not None and not isinstance(read_options, grain.ReadOptions):
        raise TypeError(f"read_options must be a grain.ReadOptions or None, got "
                        f"{type(read_options).__name__}: {read_options!r:.100}")
    size, plan, schedule = from_option(
        global_batch_size, lambda size: config.plan(layout, size),
        "a grain.DataLoader" if isinstance(ds, grain.DataLoader) else
        "batched=True" if batched else None)
    if plan.global_batch_size != size:
        check_padded_options(shard, batched, None if isinstance(ds, grain.MapDataset) else
                             "a grain.DataLoader" if isinstance(ds, grain.DataLoader) else
                             f"a grain.IterDataset ({type(ds).__name__}: pass the MapDataset "
                             "it was made from, before to_iter_dataset())")
    pipeline: Pipeline
    if isinstance(ds, grain.MapDataset):
        pipeline = GrainMapDataset(ds, plan, global_batch_size=size, shard=shard,
                                   batched=batched, remainder=remainder,
                                   read_options=read_options)
    elif isinstance(ds, grain.IterDataset):
        pipeline = GrainIterDataset(ds, plan, shard=shard, batched=batched, remainder=remainder,
                                    prove=config.check_period > 0 and schedule is None)
    elif isinstance(ds, grain.DataLoader):
        pipeline = GrainDataLoader(ds, plan, shard=shard, remainder=remainder)
    else:
        raise TypeError("from_grain expects a grain.MapDataset, grain.IterDataset or "
                        f"grain.DataLoader, got {type(ds).__name__}")
    return Loader(pipeline, layout, plan, config, schedule)


def grain_shard_options(layout: Layout, global_batch_size: int, *, drop_remainder: bool = True,
                        load_once: bool = False) -> Any:
    """The ``grain.sharding.ShardOptions`` of this process's loading group, for a Grain sampler.

    Use it instead of ``ShardByJaxProcess``, which shards by process and gives replicas that span
    processes different data. Pass the same ``load_once`` as to :func:`from_grain`. With
    ``remainder="pad"`` (every record delivered), pass ``drop_remainder=False``, here and to the
    ``Batch`` operation: Grain would drop the records that do not divide evenly between the
    loading groups, and each group's last partial batch. Grain 0.2.18 (unlike 0.2.12) reads
    ``len(sampler) // shard_count`` records a shard even then: a ``grain.DataLoader`` under
    ``remainder="pad"`` needs a record count that is a multiple of the loading groups.

    Example:
      A ``grain.DataLoader`` that shards by loading group and batches this process's rows:

      >>> import grain
      >>> layout = jaxload.data_parallel()
      >>> plan = layout.plan(global_batch_size=64)
      >>> source = grain.sources.RangeDataSource(0, 1000, 1)
      >>> sampler = grain.samplers.IndexSampler(
      ...     num_records=len(source), num_epochs=1, shuffle=True, seed=0,
      ...     shard_options=jaxload.grain_shard_options(layout, global_batch_size=64))
      >>> data_loader = grain.DataLoader(
      ...     data_source=source, sampler=sampler, worker_count=0,
      ...     operations=[grain.transforms.Batch(plan.local_batch_size, drop_remainder=True)])
      >>> loader = jaxload.from_grain(data_loader, layout, global_batch_size=64)
      >>> next(iter(loader)).shape
      (64,)

      With model replicas across processes, processes 0 and 2 of 4 share a loading group:

      >>> devices = jaxload.simulated_devices(4, 2)
      >>> across = jaxload.model_replicas_across_processes(2, devices=devices)
      >>> jaxload.grain_shard_options(across, global_batch_size=16)   # process 0's
      ShardOptions(shard_index=0, shard_count=2, drop_remainder=True)
    """
    import grain

    plan = layout.load_once_plan(global_batch_size) if load_once else layout.plan(global_batch_size)
    return grain.sharding.ShardOptions(shard_index=plan.shard_index, shard_count=plan.shard_count,
                                       drop_remainder=drop_remainder)
