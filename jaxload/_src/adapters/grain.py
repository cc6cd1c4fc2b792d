"""Grain adapter. Grain is imported only when a Grain dataset is passed in."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import jax
import numpy as np

from jaxload._src import check, compat, whereabouts
from jaxload._src.adapters.stack import stack_elements
from jaxload._src.layouts import Layout, Plan
from jaxload._src.loader import DEFAULT_TIMEOUT_S, Loader, check_options, loading_plan
from jaxload._src.passes import Source
from jaxload._src.remainder import DROP, check_padded_options, padded_batch_size, rows_read
from jaxload._src.state import Elastic, why_not_sliceable
from jaxload._src.watchdog import DEFAULT_EXIT_GRACE_S, check_on_failure


def from_grain(
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
    read_options: Any = None,
) -> Loader:
    """A :class:`~jaxload.Loader` of global batches from an unbatched Grain dataset.

    A ``grain.MapDataset`` is sharded by loading group (``ds[plan.shard_index::plan.shard_count]``:
    processes that need the same rows read the same elements), batched on the ``MapDataset`` to
    ``plan.local_batch_size`` rows (the incomplete last batch dropped or padded), and each
    per-process batch becomes one global ``jax.Array`` per feature on ``layout.sharding``. The
    batches are read by index on the loader's own thread, with no thread pool, and the position
    saved by ``get_state`` is the next batch's index. (A ``MapDataset`` with a ``filter`` cannot
    be batched by index; it is read through ``to_iter_dataset`` and batched there.)

    Args:
      ds: an unbatched ``grain.MapDataset``, or a ``grain.IterDataset`` with ``shard=False``.
        Elements are numpy arrays/scalars or dicts, tuples and nested structures of them. Or a
        ``grain.DataLoader`` (any ``worker_count``) that shards and batches itself: jaxload
        then checks that its sampler shards by this process's loading group (use
        :func:`grain_shard_options`) and that it batches ``plan.local_batch_size`` rows.
      layout: where the batches go (``jaxload.data_parallel()``, ...).
      global_batch_size: rows per step over all devices.
      shard: ``False`` if ``ds`` already holds only this loading group's elements; jaxload then
        only batches. An ``IterDataset`` cannot be sharded by index without reading every
        element, so shard its source ``MapDataset`` first
        (``source[plan.shard_index::plan.shard_count]``) and pass ``shard=False``.
      remainder: ``"drop"`` (default) ends the epoch on every process at the first step some
        process cannot fill; ``"pad"`` goes on until every process is exhausted, zero-fills the
        missing rows and adds a bool ``"mask"`` feature (dict elements only). See
        :mod:`jaxload._src.remainder`.
      batched: ``True`` if ``ds`` already yields per-process batches of
        ``plan.local_batch_size`` rows; a batch with another leading dim is refused before any
        device work. With ``shard=True`` whole batches are then dealt out to the loading groups.
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

    Resuming: ``loader.get_state()`` / ``set_state`` continue exactly on the same plan, and on
    another topology at the state's global row (``ds[rows:][k::K]``) for a sharded, unbatched
    MapDataset, or a DataLoader where its sampler allows it (see :mod:`jaxload._src.state`).
    """
    import grain

    check_options(remainder, checks, prefetch)
    check_on_failure(on_failure, exit_grace_s)
    whereabouts.check_name(name)
    if read_options is not None and not isinstance(read_options, grain.ReadOptions):
        raise TypeError(f"read_options must be a grain.ReadOptions or None, got "
                        f"{type(read_options).__name__}: {read_options!r:.100}")
    physical = padded_batch_size(layout, global_batch_size, remainder)
    plan = loading_plan(layout, physical, load_once)
    rows = plan.local_batch_size
    if physical != global_batch_size:
        check_padded_options(shard, batched, None if isinstance(ds, grain.MapDataset)
                             else f"a {type(ds).__name__}")
    if isinstance(ds, grain.MapDataset):
        if physical != global_batch_size:
            rows = max(rows_read(plan, global_batch_size), 1)

        def from_row(start: int):
            if physical != global_batch_size:  # this group's real rows of each step
                group = _real_rows(ds[start:], global_batch_size, plan)
            else:
                group = _from_row(ds, start, plan) if shard else ds
            return _map_dataset_batches(group, rows, batched, remainder, read_options)

        local_batches = from_row(0)
        elastic = _map_dataset_elastic(from_row, ds, shard, batched, global_batch_size)
    elif isinstance(ds, grain.IterDataset):
        if shard:
            raise ValueError(
                "from_grain got a grain.IterDataset with shard=True; an IterDataset cannot be "
                "sharded by index without reading every element. Shard its source MapDataset "
                f"(source[{plan.shard_index}::{plan.shard_count}] for this process, from "
                "layout.plan(global_batch_size)) before .to_iter_dataset(), and pass shard=False."
            )
        elastic = Elastic(why_not=_NOT_ELASTIC["IterDataset"])
        local_batches = _batches(_batched(ds, rows, batched, remainder))
    elif isinstance(ds, grain.DataLoader):
        if shard:
            check_data_loader(ds, plan)
        return Loader(_data_loader_batches(ds, plan, 0), layout, plan,
                      backend="grain.DataLoader", remainder=remainder, checks=checks,
                      prefetch=prefetch, timeout_s=timeout_s, on_failure=on_failure,
                      exit_grace_s=exit_grace_s, name=name, record=record,
                      elastic=_data_loader_elastic(ds, plan, shard))
    else:
        raise TypeError(
            "from_grain expects a grain.MapDataset, grain.IterDataset or grain.DataLoader, got "
            f"{type(ds).__name__}"
        )
    return Loader(local_batches, layout, plan, backend="grain", remainder=remainder,
                  checks=checks, prefetch=prefetch, timeout_s=timeout_s, on_failure=on_failure,
                  exit_grace_s=exit_grace_s, name=name, record=record, elastic=elastic)


_NOT_ELASTIC = {
    "IterDataset": "a grain.IterDataset cannot start at a given element without reading every "
                   "element before it, and its split over loading groups is yours; pass its "
                   "source MapDataset (with shard=True) so that jaxload can slice it",
    "DataLoader": "a grain.DataLoader's IndexSampler hands each of the shard_count shards a "
                  "consecutive piece of the records, so its order depends on shard_count "
                  "({was} in the state, {now} here) and a position under one has no counterpart "
                  "under the other. Keep the number of loading groups, or pass a grain.MapDataset "
                  "(shuffled with .shuffle(seed) if wanted) to from_grain, which jaxload can "
                  "slice at any row",
    "workers": "the grain.DataLoader {which} worker_count > 0, whose workers interleave their "
               "batches, so the rows consumed are not a prefix of the sampler's order; use "
               "worker_count=0, or pass a grain.MapDataset to from_grain",
    "DataLoader shard=False": "with shard=False the grain.DataLoader's sharding is yours, and "
                              "jaxload cannot tell which records another one would give each "
                              "new group; shard it with jaxload.grain_shard_options",
}


def _map_dataset_elastic(from_row, ds: Any, shard: bool, batched: bool,
                         rows_per_step: int) -> Elastic:
    """A sharded, unbatched MapDataset starts at any global row (``ds[rows:][k::K]``)."""
    identity = dict(length=len(ds), rows_per_step=rows_per_step,
                    fingerprint=functools.cache(lambda: stable_fingerprint(ds)))
    why_not = why_not_sliceable(shard, batched, "the whole MapDataset")
    if why_not:
        return Elastic(why_not=why_not, **identity)
    return Elastic(from_row=from_row, refuses=_filtered, **identity)


def stable_fingerprint(ds: Any) -> str | None:
    """:func:`fingerprint`, or None where two readings differ (random maps without a seed)."""
    first = fingerprint(ds)
    return first if first == fingerprint(ds) else None


def fingerprint(ds: Any) -> str | None:
    """A short hash of a MapDataset's first, middle and last elements (their features' names,
    dtypes and bytes): a different dataset or shuffle of the same length almost surely differs.
    None if an element cannot be read here; Python objects count by their type only.

    Example:
      >>> import grain
      >>> ds = grain.MapDataset.range(10)
      >>> fingerprint(ds.shuffle(seed=1)) != fingerprint(ds.shuffle(seed=2))
      True
      >>> len(fingerprint(ds))
      16
    """
    digest = hashlib.sha256()
    for index in sorted({0, len(ds) // 2, len(ds) - 1} if len(ds) else ()):
        try:
            element = ds[index]
        except Exception:  # the loader reports a failing element where it reads it
            return None
        for path, leaf in jax.tree_util.tree_flatten_with_path(element)[0]:
            described = f"{index}{jax.tree_util.keystr(path)}{type(leaf).__name__}"
            leaf = np.asarray(leaf)
            digest.update(f"{described}{leaf.dtype}{leaf.shape}".encode())
            if not leaf.dtype.hasobject:
                digest.update(check.fingerprint(leaf).encode())
    return digest.hexdigest()[:16]


def _filtered(state: dict) -> str | None:
    """A MapDataset that filters elements reads more indices than it delivers rows, so the rows
    consumed are no prefix of its order (seen in the state's own loading group)."""
    position = state.get("position")
    read = position.get("next_index", 0) if isinstance(position, dict) else 0
    rows = state["step"] * state["plan"]["local_batch_size"]
    if read <= rows:
        return None
    return (f"the MapDataset drops elements (filter): the state's loading group read {read} "
            f"indices for {rows} rows, so the rows consumed are not a prefix of its order; "
            "make the kept elements a MapDataset of their own (e.g. grain.MapDataset.source of "
            "the kept indices, then .map), or resume on the same topology")


def _from_row(ds: Any, rows: int, plan: Plan) -> Any:
    """This loading group's share of the MapDataset's global order from row ``rows`` on."""
    if not rows and plan.shard_count == 1:  # a slice adds work per element; [0:][0::1] is ds
        return ds
    return ds[rows:][plan.shard_index :: plan.shard_count]


def _map_dataset_batches(group: Any, rows: int, batched: bool, remainder: str,
                         read_options: Any):
    """``local_batches`` of this group's MapDataset: batched on the MapDataset and read by
    index, or through ``to_iter_dataset`` with ``read_options`` (Grain's threads), or, where
    Grain cannot batch by index (a ``filter``), batched after ``to_iter_dataset``."""
    by_index = group if batched else _batched_by_index(group, rows, remainder)
    if by_index is None:
        iterated = group.to_iter_dataset(read_options or _no_threads())
        return _batches(_batched(iterated, rows, batched, remainder))
    if read_options is None:
        return _indexed_batches(by_index)
    return _batches(by_index.to_iter_dataset(read_options))


def _batched(ds: Any, rows: int, batched: bool, remainder: str) -> Any:
    if batched:
        return ds
    return ds.batch(rows, drop_remainder=remainder == DROP, batch_fn=stack_elements)


def _batches(ds: Any):
    def local_batches(position: dict | None):
        """This group's batches with Grain's own iterator state after each one."""
        iterator = iter(ds)
        if position is not None:
            iterator.set_state(position)
        for batch in iterator:
            yield batch, iterator.get_state()

    return local_batches


def _no_threads():
    """Grain's ReadOptions without a thread pool, for a MapDataset that must be iterated."""
    import grain

    return grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _batched_by_index(ds: Any, rows: int, remainder: str) -> Any:
    """``ds.batch(rows)`` on the MapDataset (jaxload's aligned stacking), or None where Grain
    cannot batch it by index (after a ``filter`` or ``flat_map``, which drop elements)."""
    if compat.drops_elements(ds):
        return None
    return ds.batch(rows, drop_remainder=remainder == DROP, batch_fn=stack_elements)


def _indexed_batches(batches: Any):
    """The batches of a batched MapDataset read by index, each with its position after it."""

    def local_batches(position: dict | None) -> Source:
        start = _next_batch(position)
        # the length lets the loader agree on the step count once, then read batch by batch
        return Source(((batches[i], {"next_batch": i + 1}) for i in range(start, len(batches))),
                      length=max(len(batches) - start, 0))

    return local_batches


def _next_batch(position: dict | None) -> int:
    """The index of the batch a position (``{"next_batch": k}``, None: the start) resumes at."""
    if position is None:
        return 0
    if not isinstance(position, dict) or not isinstance(position.get("next_batch"), int):
        raise ValueError(f"a Grain MapDataset position is {{'next_batch': <int>}}, got "
                         f"{position!r:.200}")
    return position["next_batch"]


def _source_length(loader: Any) -> int | None:
    try:
        return len(compat.data_loader_source(loader))
    except TypeError:
        return None


def _real_rows(ds: Any, global_batch_size: int, plan: Plan) -> Any:
    """The elements of this group's real rows when the global batch is padded: of every
    ``global_batch_size`` elements, those at this group's rows (none for a group of padding)."""
    import grain

    start, rows = plan.global_rows[0], rows_read(plan, global_batch_size)
    full, last = divmod(len(ds), global_batch_size)
    count = full * rows + min(max(last - start, 0), rows) if rows else 0
    return grain.MapDataset.range(count).map(
        lambda k: ds[(k // rows) * global_batch_size + start + k % rows])


def grain_shard_options(layout: Layout, global_batch_size: int, *, drop_remainder: bool = True,
                        load_once: bool = False):
    """The ``grain.sharding.ShardOptions`` of this process's loading group, for a Grain sampler.

    Use it instead of ``ShardByJaxProcess``, which shards by process and gives replicas that span
    processes different data. Pass the same ``load_once`` as to :func:`from_grain`.

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

    plan = loading_plan(layout, global_batch_size, load_once)
    return grain.sharding.ShardOptions(shard_index=plan.shard_index, shard_count=plan.shard_count,
                                       drop_remainder=drop_remainder)


def check_data_loader(loader: Any, plan: Plan) -> None:
    """A ``grain.DataLoader`` must shard by this process's loading group and batch
    ``plan.local_batch_size`` rows; a ValueError names both values otherwise."""
    import grain

    options = compat.data_loader_shard_options(loader)
    if (options.shard_index, options.shard_count) != (plan.shard_index, plan.shard_count):
        raise ValueError(
            f"the grain.DataLoader shards by shard_index={options.shard_index}, shard_count="
            f"{options.shard_count} ({type(options).__name__}), but this process's loading group "
            f"is shard_index={plan.shard_index} of shard_count={plan.shard_count}. Processes "
            "whose devices need the same rows must read the same shard (ShardByJaxProcess is "
            "wrong once a model replica spans processes); pass "
            "shard_options=jaxload.grain_shard_options(layout, global_batch_size) to the sampler."
        )
    batches = [op for op in compat.data_loader_operations(loader)
               if isinstance(op, grain.transforms.Batch)]
    if not batches or batches[-1].batch_size != plan.local_batch_size:
        found = f"batch_size={batches[-1].batch_size}" if batches else "no Batch operation"
        raise ValueError(
            f"the grain.DataLoader batches with {found}, but each process must load "
            f"local_batch_size={plan.local_batch_size} rows per step (global_batch_size="
            f"{plan.global_batch_size} over {plan.shard_count} loading groups); end its "
            f"operations with grain.transforms.Batch({plan.local_batch_size}, drop_remainder=True)."
        )


def _data_loader_elastic(loader: Any, plan: Plan, shard: bool) -> Elastic:
    """A grain.DataLoader continues at a global row where its sampler allows it: the same
    number of loading groups (the IndexSampler's order depends on it) and no workers."""
    length = _source_length(loader)
    if not shard:
        return Elastic(why_not=_NOT_ELASTIC["DataLoader shard=False"], length=length)
    if loader.multiprocessing_options.num_workers:
        return Elastic(why_not=_NOT_ELASTIC["workers"].format(which="has"), length=length)

    def refuses(state: dict) -> str | None:
        was = state["plan"]["shard_count"]
        if was != plan.shard_count:
            return _NOT_ELASTIC["DataLoader"].format(was=was, now=plan.shard_count)
        if state["position"] and json.loads(state["position"])["worker_count"]:
            return _NOT_ELASTIC["workers"].format(which="of the state had")
        return None

    return Elastic(from_row=lambda rows: _data_loader_batches(loader, plan, rows),
                   refuses=refuses, length=length)


def _data_loader_batches(loader: Any, plan: Plan, rows: int):
    """Batches of a grain.DataLoader with its iterator state (JSON text) after each one,
    from global row ``rows`` on (sampler index ``rows + shard_index``, no workers)."""

    def local_batches(position: str | None):
        iterator = iter(loader)
        if position is not None:
            iterator.set_state(position.encode())
        elif rows:
            iterator.set_state(_at_sampler_index(iterator.get_state(), rows, plan))
        for batch in iterator:
            yield batch, iterator.get_state().decode()

    return local_batches


def _at_sampler_index(state: bytes, rows: int, plan: Plan) -> bytes:
    """A DataLoader iterator state (no workers) whose next sampler index is
    ``rows + shard_index``: group ``k`` of ``K`` reads indices ``k + K * j``."""
    moved = json.loads(state)
    moved["last_seen_indices"] = {"0": rows + plan.shard_index - plan.shard_count}
    return json.dumps(moved).encode()
