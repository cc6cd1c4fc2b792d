"""The Loader (configuration, state) and its per-pass iterator (:class:`LoaderIterator`).

Each ``iter(loader)`` is one pass over the data, run by :class:`jaxload._src.passes.Pass`: before
steps are handed out, all processes agree on how many exist (:mod:`jaxload._src.protocol`), so a
process that runs out of data early never leaves the others blocked in a collective, and a
process that fails stops the others with its error. The iterator hands the batches to the loop,
reshards them (``load_once``) and checks them on the loop's thread, and records the position
that :meth:`Loader.get_state` returns.

A pass stopped early tells the others from :meth:`LoaderIterator.close` (also called by
``with``, by the next ``iter(loader)`` and by :meth:`Loader.close`); an iterator dropped without
``close()`` is closed on a background thread, never inside a finalizer.

``get_state``/``set_state`` record and restore where a pass stands: the backend's position, for an
exact resume on the same plan, and the global row position, for a resume on another topology
(:mod:`jaxload._src.state`); an adapter supplies how its pipeline starts at a global row
(:class:`jaxload._src.state.Elastic`). :mod:`jaxload.checkpoint` puts the state in Orbax checkpoints.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from jaxload._src import agreement, check, watchdog, whereabouts
from jaxload._src import state as states
from jaxload._src.agreement import PeerFailedError
from jaxload._src.layouts import Layout, Plan
from jaxload._src.passes import Handout, Pass
from jaxload._src.prefetch import closer, prefetched
from jaxload._src.records import Recorder
from jaxload._src.records import gather as gather_records
from jaxload._src.remainder import DROP, MASK, PAD, check_paddable, check_remainder
from jaxload._src.stats import Stats, StatsSummary, gather, timed

PyTree = Any

DEFAULT_TIMEOUT_S = 600.0
_START = states.START


class Loader:
    """An iterable of global batches (pytrees of ``jax.Array``), one pass per ``iter()``.

    Built by :func:`jaxload.from_tf_data` or :func:`jaxload.from_grain`. Every process must
    iterate every loader in the same order (as with any multi-process JAX computation).

    Attributes:
      layout: the layout the batches are placed on.
      plan: this process's loading plan (``shard_index``, ``local_batch_size``, ...).
      remainder: ``"drop"`` or ``"pad"`` (see :mod:`jaxload._src.remainder`).
      prefetch: how many global batches are assembled ahead on a background thread while the
        training step runs (0: none, everything happens in ``next()``).

    When a pass fails on any process (an exception in reading, assembling, resharding or
    checking, a stuck pipeline, an uncaught exception of the program), every process's next
    ``next()`` raises it (:class:`~jaxload.PeerFailedError` on the others). With
    ``on_failure="exit"`` (the default) each process still running ``exit_grace_s`` seconds
    later ends with exit code 1, since it may be inside a collective that will never complete;
    ``on_failure="raise"`` only raises. See :mod:`jaxload._src.watchdog`.

    With ``checks="first"`` (the default) the first step of each pass also verifies that every
    process built the same layout (:func:`jaxload.check.plan`) and that the batch is placed right
    (:func:`jaxload.check.batch`: replicas identical, different row blocks distinct); ``checks=N``
    repeats the batch check every N steps, ``checks="never"`` turns them off
    (``benchmarks/check_cost.py`` measures what they cost).

    Example:
      >>> import grain
      >>> ds = grain.MapDataset.range(64).map(lambda i: {"id": np.int32(i)})
      >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
      >>> for batch in loader:            # one pass over ds: 4 global batches of 16 rows
      ...     print(batch["id"].shape, batch["id"].sharding.spec, np.asarray(batch["id"])[:3])
      (16,) P('data',) [0 1 2]
      (16,) P('data',) [16 17 18]
      (16,) P('data',) [32 33 34]
      (16,) P('data',) [48 49 50]
    """

    def __init__(
        self,
        local_batches: Callable[[Any], Iterator[tuple[PyTree, Any]]],
        layout: Layout,
        plan: Plan,
        *,
        backend: str = "custom",
        remainder: str = DROP,
        checks: str | int = "first",
        prefetch: int = 2,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        not_resumable: str | None = None,
        elastic: states.Elastic = states.NOT_ELASTIC,
        record: str | None = None,
        on_failure: str = "exit",
        exit_grace_s: float = watchdog.DEFAULT_EXIT_GRACE_S,
        name: str | None = None,
        spec: Callable[[], PyTree] | None = None,
    ):
        """``local_batches(position)`` starts a pass at a backend position (None: the start) and
        yields this process's numpy batches, each with the backend position after it (JSON).
        ``not_resumable``: why ``set_state`` cannot work with this backend, if it cannot.
        ``elastic``: how the pipeline starts at a global row, for a state from another topology
        (:class:`jaxload._src.state.Elastic`).
        ``record``: a top-level feature whose values per step :meth:`records` returns.
        ``on_failure``, ``exit_grace_s``: what a process does when a pass fails on any process
        (:mod:`jaxload._src.watchdog`).
        ``name``: names the loader's exchanges between processes (by default the line of the
        program that built it: :mod:`jaxload._src.whereabouts`); give loaders built on one line (in
        a loop or a helper) names of their own, the same on every process."""
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self._on_failure = watchdog.check_on_failure(on_failure, exit_grace_s)
        self.prefetch = check_prefetch(prefetch)
        self._check_period = check_period(checks)
        self.layout = layout
        self.plan = plan
        self.remainder = check_remainder(remainder)
        self._local_batches = local_batches
        # plan.sharding differs from the layout's with load_once: every process loaded its own
        # rows, and a reshard on device (device_put of global arrays: no host data involved)
        # moves them where the layout wants them. It is a cross-process collective, so it runs
        # on the loop's thread, in program order with the training step's collectives: issued
        # from the prefetch thread, processes could launch collectives in different orders, or
        # one could launch a reshard that another (stopped early) never joins.
        self._reshard = (None if plan.sharding == layout.sharding
                         else lambda batch: jax.device_put(batch, layout.shardings(batch)))
        self._backend = backend
        self._timeout_s = timeout_s
        self._not_resumable = not_resumable
        self._elastic = elastic
        self.name = whereabouts.loader_name(name)
        self._spec = spec
        self._local_spec: tuple[Any, list[tuple[tuple[int, ...], Any]]] | None = None
        self._passes = 0
        self._stats = Stats(jax.process_index())
        # where the current (or next) pass stands: step, origin (the global row its pipeline
        # started at), backend position
        self._position = _START
        self._resume = _START  # where the next pass starts
        self._current: weakref.ref[LoaderIterator] | None = None
        self._recorder = Recorder(record, plan.shard_index)

    def __repr__(self) -> str:
        p = self.plan
        return (
            f"Loader(global_batch_size={p.global_batch_size}, local_batch_size="
            f"{p.local_batch_size}, shard_index={p.shard_index}, shard_count={p.shard_count}, "
            f"remainder={self.remainder!r})"
        )

    def __iter__(self) -> LoaderIterator:
        """A new pass (closing the previous one, if it is still open)."""
        self.close()
        start, self._resume = self._resume, _START
        self._position = start
        name = whereabouts.CREATED.new(f"loader/{self.name}/pass",
                                       f"loader {self.name!r} pass {{ordinal}}")
        waiting = threading.Event()  # the loop waits in next(): blocked on this pass's rounds
        exchange = agreement.Exchange(name, self._timeout_s, watch=watchdog.this_process(),
                                      blocking=waiting.is_set)
        self._passes += 1
        self._recorder.start_pass()
        current = LoaderIterator(self, exchange, start, waiting)
        # weakly held: a pass dropped by the loop (a `break`) is closed at once, not at exit
        self._current = weakref.ref(current)
        return current

    def close(self) -> None:
        """Ends the current pass on this process (the others end it at their next round)."""
        current = self._current and self._current()
        if current is not None:
            current.close()

    def stats(self, *, all_processes: bool = False) -> Stats | StatsSummary:
        """Where this loader's time went, since it was created (see :mod:`jaxload._src.stats`).

        Returns this process's :class:`~jaxload._src.stats.Stats`, or with ``all_processes=True``
        a :class:`~jaxload._src.stats.StatsSummary` of every process naming the slowest; that form
        exchanges the numbers, so every process must call it at the same point.

        Example:
          >>> import grain
          >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
          ...                             global_batch_size=16)
          >>> for batch in loader:
          ...     pass                                      # the training step
          >>> loader.stats().steps
          4
          >>> summary = loader.stats(all_processes=True)    # every process calls it
          >>> summary.slowest, summary.process_count
          (0, 1)
        """
        mine = dataclasses.replace(self._stats)
        if not all_processes:
            return mine
        name = whereabouts.CREATED.new(f"loader/{self.name}/stats",
                                       f"stats of loader {self.name!r} (call {{ordinal}})")
        return gather(mine, name, self._timeout_s)

    def batch_spec(self, step: int | None = None) -> PyTree:
        """The global batch at ``step`` (the next one by default) as a pytree of
        ``jax.ShapeDtypeStruct(shape, dtype, sharding=...)``, before any data is handed out,
        including ``"mask"`` under ``remainder="pad"``: to compile the training step ahead of
        time. Every step of a loader has the same spec.

        It comes from the pipeline's element spec (tf.data), or from its first batch, read once
        from a fresh iterator (Grain): the loader's position does not move. No exchange with
        the other processes.

        Example:
          >>> import grain
          >>> ds = grain.MapDataset.range(64).map(lambda i: {"x": np.full(3, i, np.float32)})
          >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
          >>> spec = loader.batch_spec()
          >>> spec["x"].shape, spec["x"].dtype, spec["x"].sharding.spec
          ((16, 3), dtype('float32'), P('data',))
          >>> step = jax.jit(lambda batch: batch["x"].sum()).lower(spec).compile()
          >>> float(step(next(iter(loader))))
          360.0
        """
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
            raise ValueError(f"step={step!r} must be None (the next step) or an int >= 0")
        if self._local_spec is None:
            self._local_spec = self._read_local_spec()
        treedef, leaves = self._local_spec
        rows = self.plan.global_batch_size
        tree = jax.tree_util.tree_unflatten(
            treedef, [jax.ShapeDtypeStruct((rows, *shape), dtype) for shape, dtype in leaves])
        return jax.tree_util.tree_map(
            lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
            tree, self.layout.shardings(tree))

    def _read_local_spec(self) -> tuple[Any, list[tuple[tuple[int, ...], Any]]]:
        """A per-process batch's structure and each leaf's feature shape and dtype, with the
        ``mask`` of ``remainder="pad"``."""
        if self._spec is not None:
            local = self._spec()
        else:
            batches = iter(self._local_batches(None))
            first = next(batches, None)
            close = getattr(batches, "close", None)
            if close is not None:
                close()
            if first is None:
                raise ValueError("the pipeline is empty: no batch to take the batch spec from")
            local = first[0]
        if self.remainder == PAD:
            check_paddable(local)
            local = {**local, MASK: jax.ShapeDtypeStruct((self.plan.local_batch_size,), bool)}
        leaves, treedef = jax.tree_util.tree_flatten(local)
        shapes = []
        for leaf in leaves:
            if not hasattr(leaf, "dtype"):
                leaf = np.asarray(leaf)
            shapes.append((tuple(np.shape(leaf))[1:], np.dtype(leaf.dtype)))
        return treedef, shapes

    def records(self, *, all_processes: bool = False, clear: bool = False) -> list[dict]:
        """Per step handed out, the values of the ``record=`` feature each loading group
        contributed (real rows only), in step order: ``{"pass": 0, "step": 3, "ids": {0: [...],
        1: [...]}}`` with ``ids`` keyed by loading group (``shard_index``). Host-side: no device
        work. See :mod:`jaxload._src.records`.

        By default this process's group only. With ``all_processes=True`` (every process calls
        it at the same point) process 0 gets every group's ids; the others get their own.
        ``clear=True`` forgets the steps returned, to log them in chunks.

        Example:
          >>> import grain
          >>> ds = grain.MapDataset.range(64).map(lambda i: {"id": np.int32(i)})
          >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16,
          ...                             record="id")
          >>> for batch in loader:
          ...     pass
          >>> loader.records(all_processes=True)[-1]
          {'pass': 0, 'step': 3, 'ids': {0: [48, 49, 50, ..., 63]}}

          With two loading groups (two processes), each step's ids are keyed ``0`` and ``1``.
        """
        if self._recorder.feature is None:
            raise ValueError("this loader records nothing; build it with record='<feature>' "
                             "(e.g. record='id') to get records()")
        mine = self._recorder.steps(clear=clear)
        if not all_processes:
            return mine
        name = whereabouts.CREATED.new(f"loader/{self.name}/records",
                                       f"records of loader {self.name!r} (call {{ordinal}})")
        return gather_records(mine, self.plan, self._timeout_s, name)

    def get_state(self) -> dict:
        """The position after the last batch handed out, as a JSON-serializable dict.

        It holds this loading group's backend position and the global row position ``rows``
        (rows of the pipeline's global order consumed: the same on every process). Save it, e.g.
        with :mod:`jaxload.checkpoint` in an Orbax checkpoint, and give it to ``set_state`` of a
        fresh loader over the same pipeline: on the same topology it continues with the same
        batches on every process; on another one at the same global row (see
        :mod:`jaxload._src.state`).

        Example:
          >>> import grain, json
          >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
          ...                             global_batch_size=16)
          >>> batches = iter(loader)
          >>> first, second = next(batches), next(batches)
          >>> state = loader.get_state()
          >>> state["step"], state["rows"]
          (2, 32)
          >>> text = json.dumps(state)       # e.g. next to this process's model checkpoint
        """
        return states.describe(self._backend, self.plan, self.remainder, self._elastic,
                               self._position)

    def set_state(self, state: dict) -> None:
        """Makes the next pass continue from ``state`` (from ``get_state``).

        Under the same plan (loading group, batch sizes) the pass continues exactly where the
        state's process stood. Under another plan (process count, layout, loading groups, global
        batch size) a state taken by any process of the old run continues at its global row,
        where the pipeline can start there exactly (a sharded Grain MapDataset or tf.data
        pipeline); otherwise it is refused, saying why. A state taken with another backend,
        remainder mode, dataset length or fingerprint is refused, naming both values.

        Example:
          >>> import grain
          >>> ds = grain.MapDataset.range(64)
          >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
          >>> batches = iter(loader)
          >>> first, second = next(batches), next(batches)
          >>> state = loader.get_state()
          >>> fresh = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16)
          >>> fresh.set_state(state)
          >>> print(np.asarray(next(iter(fresh)))[:4])     # the same plan: exactly where it stood
          [32 33 34 35]

          Another plan (here a larger global batch) continues at the state's global row:

          >>> bigger = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=32)
          >>> bigger.set_state(state)
          >>> print(np.asarray(next(iter(bigger)))[[0, -1]])
          [32 63]
        """
        self._resume = states.resume_point(state, self.get_state(), self._not_resumable,
                                           self._elastic)


    # -- Orbax v1: a Loader is a StatefulCheckpointable ---------------------------------------
    async def save(self, directory: Any):
        """Orbax v1's ``StatefulCheckpointable.save``: this process's state, taken now, written
        as ``process_<i>-of-<n>.json`` in ``directory``.

        Example:
          >>> import grain, os, tempfile
          >>> import orbax.checkpoint as ocp
          >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
          ...                             global_batch_size=16)
          >>> batches = iter(loader)
          >>> first = next(batches)
          >>> path = tempfile.mkdtemp() + "/step_1"
          >>> params = {"w": np.ones(3, np.float32)}
          >>> ocp.v1.save_checkpointables(path, {"params": params, "loader": loader})
          >>> os.listdir(os.path.join(path, "loader"))
          ['process_0-of-1.json']
        """
        from jaxload._src import checkpoint

        return await checkpoint.save_v1(self, directory)

    async def load(self, directory: Any):
        """Orbax v1's ``StatefulCheckpointable.load``: ``set_state`` from the saved state (this
        process's, or on another process count the lowest-numbered process's).

        Example:
          >>> import grain, tempfile
          >>> import orbax.checkpoint as ocp
          >>> ds, layout = grain.MapDataset.range(64), jaxload.data_parallel()
          >>> loader = jaxload.from_grain(ds, layout, global_batch_size=16)
          >>> batches = iter(loader)
          >>> first = next(batches)
          >>> path = tempfile.mkdtemp() + "/step_1"
          >>> ocp.v1.save_checkpointables(path, {"loader": loader})
          >>> fresh = jaxload.from_grain(ds, layout, global_batch_size=16)
          >>> restored = ocp.v1.load_checkpointables(path, {"loader": fresh})
          >>> print(np.asarray(next(iter(fresh)))[:4])
          [16 17 18 19]
        """
        from jaxload._src import checkpoint

        return await checkpoint.load_v1(self, directory)


class LoaderIterator:
    """One pass of a :class:`Loader`: an iterator of global batches with :meth:`close`.

    Example:
      >>> import grain
      >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
      ...                             global_batch_size=16)
      >>> with iter(loader) as batches:       # one pass; stopped after 2 steps
      ...     for step, batch in zip(range(2), batches):
      ...         print(step, np.asarray(batch)[:3])
      0 [0 1 2]
      1 [16 17 18]
      >>> # leaving the block closed the pass: the other processes end it too
    """

    def __init__(self, loader: Loader, exchange: agreement.Exchange, start: dict,
                 waiting: threading.Event | None = None):
        self._loader = loader
        self._exchange = exchange
        self._waiting = waiting or threading.Event()
        failure = self._failure = [None]  # shared with the pass, which must not hold self
        self._start = start
        dog = self._watchdog = watchdog.this_process()
        dog.start()  # here, not in __del__: a finalizer must not start threads
        dog.opened(exchange.prefix, *loader._on_failure)
        source = loader._elastic.pipeline(start, loader._local_batches)
        run = Pass(exchange, source, loader.plan, remainder=loader.remainder, start=start,
                   stats=loader._stats, check_period=loader._check_period,
                   failure=lambda: failure[0], recorder=loader._recorder, watchdog=dog,
                   read_limit_s=loader._timeout_s)
        stats = loader._stats

        def count_ready(n: int) -> None:
            stats.ready_sum += n

        prefix = exchange.prefix
        self._items: Iterator[Handout] = (
            prefetched(run.__iter__, loader.prefetch, on_request=count_ready,
                       interrupt=lambda: dog.interruption(prefix))
            if loader.prefetch else iter(run))
        self._closed = False
        self._last = time.perf_counter()
        closer.start()  # here, not in __del__: a finalizer must not start threads

    def __iter__(self) -> LoaderIterator:
        return self

    def __next__(self) -> PyTree:
        if self._closed:
            raise StopIteration
        loader, stats = self._loader, self._loader._stats
        asked = time.perf_counter()
        interruption = self._watchdog.interruption(self._exchange.prefix)
        if interruption is not None:  # a peer failed (or this pipeline is stuck): no RPC here
            self.close()
            raise interruption
        self._waiting.set()
        try:
            handout = next(self._items)
        except StopIteration:
            self._ended()
            loader._position = _START  # a finished pass: the next one starts from the beginning
            raise
        except BaseException:
            self._ended()  # the pass reported the failure itself
            raise
        finally:
            self._waiting.clear()
        batch = self._handed_out(handout)
        loader._recorder.handed_out(handout.step)
        now = time.perf_counter()
        loader._position = {**self._start, **handout.position}  # and the pipeline's origin
        stats.steps += 1
        stats.wait_s += now - asked
        stats.elapsed_s += now - self._last
        stats.nbytes += handout.nbytes
        self._last = now
        return batch

    def _handed_out(self, handout: Handout) -> PyTree:
        """Reshards (``load_once``) and checks a batch on the loop's thread: both are
        collectives, issued here in program order with the training step's own."""
        loader, batch = self._loader, handout.batch
        if loader._reshard is not None:
            with timed(loader._stats, "assemble"):
                batch = self._resharded(handout)
        if handout.checks:
            with timed(loader._stats, "check"):
                # one series per pass (its checks are counted in it): what this process
                # remembers of the exchanges it created stays one entry per pass
                at = f"{loader.name}.pass{self._exchange.name.ordinal}"
                try:
                    if handout.checks == "plan+batch":
                        check.plan(loader.layout, loader.plan.global_batch_size,
                                   timeout_s=loader._timeout_s, name=at)
                    check.batch(batch, timeout_s=loader._timeout_s, name=at)
                except Exception:
                    # a check is an exchange of its own: its verdict, or a process's failure
                    # to compute it, reached every process already
                    self.close()
                    raise
        return batch

    def _resharded(self, handout: Handout) -> PyTree:
        """The ``load_once`` reshard, a collective of every process.

        A process whose reshard fails says so at once (:meth:`Exchange.mark_failed`), then
        still joins the collective, with zeros, so that no other process is left inside it;
        the others read that mark after their reshard returns and raise instead of handing
        the batch out (with XLA:CPU's synchronous collectives that read always sees the mark;
        where dispatch is asynchronous the round after the window reports it in any case).
        """
        loader = self._loader
        try:
            batch = loader._reshard(handout.batch)
        except Exception as e:
            failure = watchdog.Failure(jax.process_index(), "resharding", handout.step,
                                       f"{type(e).__name__}: {e}", self._exchange.prefix)
            self._watchdog.publish(failure, e)  # also what the others read after the collective
            watchdog.add_note(e, f"jaxload: {failure.text} (told every process)")
            try:
                zeros = jax.tree_util.tree_map(jax.numpy.zeros_like, handout.batch)
                jax.device_put(zeros, loader.layout.shardings(zeros))
            except Exception:  # noqa: BLE001 - the original failure is what is raised
                pass
            e.jaxload_stage, e.jaxload_step = "resharding", handout.step
            self._failure[0] = e
            self.close()
            raise
        failed = self._exchange.failed()
        if failed is not None:
            self.close()
            raise PeerFailedError(failed)
        return batch

    def close(self) -> None:
        """Ends this pass on this process; the others end it at their next round.

        Idempotent; also called by ``with``, the next ``iter(loader)`` and ``loader.close()``.
        """
        if self._closed:
            return
        self._ended()
        self._items.close()

    def _ended(self) -> None:
        self._closed = True
        self._watchdog.closed(self._exchange.prefix)

    def __enter__(self) -> LoaderIterator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped without close() (a `break` out of a for loop): closing may exchange with the
        # other processes, which must not happen inside a finalizer, so a thread does it.
        if not getattr(self, "_closed", True):
            self._ended()
            closer.close_later(self._items)


def loading_plan(layout: Layout, global_batch_size: int, load_once: bool) -> Plan:
    """What this process loads: its loading group's rows, or with ``load_once`` its own
    ``1/num_processes`` of them (:meth:`~jaxload.Layout.load_once_plan`)."""
    if not isinstance(load_once, bool):
        raise TypeError(f"load_once must be True or False, got {load_once!r}")
    if load_once:
        return layout.load_once_plan(global_batch_size)
    return layout.plan(global_batch_size)


def check_options(remainder: str, checks: str | int, prefetch: int) -> None:
    """The loader options of both adapters, validated before any pipeline is built."""
    check_remainder(remainder)
    check_period(checks)
    check_prefetch(prefetch)


def check_prefetch(prefetch: int) -> int:
    if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0:
        raise ValueError(f"prefetch={prefetch!r} must be an int >= 0 (batches assembled ahead; 0 "
                         "turns prefetching off)")
    return prefetch


def check_period(checks: str | int) -> int:
    """Steps between automatic checks: 0 for never, 2**63 for the first step only."""
    if checks == "first":
        return 2**63
    if checks == "never":
        return 0
    if isinstance(checks, int) and not isinstance(checks, bool) and checks >= 1:
        return checks
    raise ValueError(f"checks={checks!r} must be 'first', 'never' or a positive int N (every N steps)")
