"""The Loader (configuration, state) and its per-pass iterator (:class:`LoaderIterator`).

Each ``iter(loader)`` is one pass over the data, run by :class:`jaxload._src.passes.Pass`: before
steps are handed out, all processes agree on how many exist (:mod:`jaxload._src.protocol`), so a
process that runs out of data early never leaves the others blocked in a collective, and a process
that fails stops the others with its error. The iterator (:mod:`jaxload._src.iterator`) hands out,
reshards (``load_once``), checks the batches and records the position :meth:`Loader.get_state` returns.

A pass stopped early tells the others from :meth:`LoaderIterator.close` (``with``, the next
``iter(loader)``, :meth:`Loader.close`); one dropped is closed on a background thread."""

from __future__ import annotations

import threading
import weakref
from typing import Any

import jax

from jaxload._src import agreement, watchdog, whereabouts
from jaxload._src import state as states
from jaxload._src.assemble import resharder
from jaxload._src.batch_spec import global_spec, local_spec
from jaxload._src.checkpointable import Checkpointable
from jaxload._src.config import LoaderConfig
from jaxload._src.explained import Explained
from jaxload._src.iterator import LoaderIterator, LoopSide
from jaxload._src.layout import Layout, Plan
from jaxload._src.pass_context import PassContext
from jaxload._src.pipelines.base import Pipeline
from jaxload._src.records import Recorder
from jaxload._src.records import gather as gather_records
from jaxload._src.resume_agreement import agreed_resume_point
from jaxload._src.schedule import Schedule, next_pass, step_of
from jaxload._src.state import START
from jaxload._src.stats import Stats, StatsSummary, gather
from jaxload._src.trees import BatchSpec
from jaxload._src.validate import is_nonnegative_int


class Loader(Checkpointable, Explained):
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
    (:func:`jaxload.check.batch`: replicas identical, different row blocks distinct where each
    loading group reads its own pipeline); ``checks=N`` repeats the batch check every N steps,
    ``checks="never"`` turns them off (``benchmarks/check_cost.py`` measures what they cost).

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

    def __init__(self, pipeline: Pipeline, layout: Layout, plan: Plan, config: LoaderConfig,
                 schedule: Schedule | None = None):
        """Built by :func:`jaxload.from_grain` / :func:`jaxload.from_tf_data`: ``pipeline`` is
        this group's share (:mod:`jaxload._src.pipelines`), ``plan`` what this process loads."""
        self.layout, self.config, self._schedule = layout, config, schedule
        self.plan = plan if schedule is None else schedule.plan  # (the pipeline's: plan)
        self.prefetch, self.remainder = config.prefetch, config.remainder
        self._pipeline, self._reshard = pipeline, resharder(plan, layout)  # (load_once: loop's)
        self._handed = getattr(pipeline, "handed", lambda position: None)  # (see Pipeline)
        self.name = whereabouts.loader_name(config.name)
        self._local_spec: Any = None
        self._stats, self._recorder = Stats(jax.process_index()), Recorder(config.record, plan.shard_index)
        self._position: dict[str, Any] = START  # the current (or last) pass's (see START)
        self._resume: dict[str, Any] = START  # where the next pass starts
        self._current: weakref.ref[LoaderIterator] | None = None
        self._ahead: LoaderIterator | None = None  # a pass set_state started early

    def __repr__(self) -> str:
        p, s = self.plan, self._schedule
        return (f"Loader(global_batch_size={s.as_json() if s else p.global_batch_size}, "
                f"local_batch_size={p.local_batch_size}, shard_index={p.shard_index}, "
                f"shard_count={p.shard_count}, remainder={self.remainder!r})")

    def __iter__(self) -> LoaderIterator:
        """A new pass (closing one still open), from where ``set_state`` put it, or the start."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not ahead.closed:  # started by set_state: already reading
            return ahead
        start, self._resume = self._resume, START
        if self._schedule is not None and start is START:  # the schedule goes on
            start = next_pass(self._position, start)
        shown, after = self._position, getattr(self._pipeline, "after_pass", None)
        if start is not START or not shown["position"]:  # (shown: the state until its first
            shown = start  # batch: a finished pass's names the next pass; after a break, the
        elif shown["step"]:  # pipeline's after_pass names it)
            shown = start if after is None else {**START, "position": after(shown["position"])}
        return self._iter_from(start, shown)

    def _iter_from(self, start: dict[str, Any], shown: dict[str, Any] | None = None) -> LoaderIterator:
        """The only way a pass starts: at ``start`` (``step``, ``origin``, backend ``position``)."""
        self.close()
        self._position = shown or start
        name = whereabouts.CREATED.new(f"loader/{self.name}/pass",
                                       f"loader {self.name!r} pass {{ordinal}}")
        waiting = threading.Event()  # the loop waits in next(): blocked on this pass's rounds
        exchange = agreement.Exchange(name, self.config.timeout_s, watch=watchdog.this_process(),
                                      blocking=waiting.is_set)
        self._recorder.start_pass()
        schedule = self._schedule and self._schedule.after(start.get("steps_before", 0))
        context = PassContext(exchange, self.plan, self.config, start, self._stats, self._recorder,
                              watchdog.this_process(), waiting, schedule=schedule)
        source = self._pipeline.elastic.pipeline(start, self._pipeline.batches)
        if schedule is not None:  # each step's batch joined from the pipeline's
            source = schedule.regrouped(source, start["step"], self.config.pad)
        current = LoaderIterator(LoopSide(self.name, self.layout, self._reshard, self._handed_out,
                                          getattr(self._pipeline, "after_pass", None)), context, source)
        self._current = weakref.ref(current)  # weakly: a pass dropped (`break`) closes at once
        return current

    def _handed_out(self, position: dict[str, Any]) -> None:
        self._position = position  # the iterator's report, after each batch handed out
        self._handed(position["position"])

    def close(self) -> None:
        """Ends the current pass on this process (the others end it at their next round)."""
        self._ahead, current = None, self._current() if self._current is not None else None
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
        mine = self._stats.copy()
        if not all_processes:
            return mine
        name = whereabouts.CREATED.new(f"loader/{self.name}/stats",
                                       f"stats of loader {self.name!r} (call {{ordinal}})")
        return gather(mine, name, self.config.timeout_s)

    def batch_spec(self, step: int | None = None) -> BatchSpec:
        """The global batch at ``step`` (the next one by default) as a pytree of
        ``jax.ShapeDtypeStruct(shape, dtype, sharding=...)``, before any data is handed out,
        including ``"mask"`` under ``remainder="pad"``: to compile the training step ahead of
        time. Under a batch-size schedule, the size is that of ``step`` (counted across passes).

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
        if step is not None and not is_nonnegative_int(step):
            raise ValueError(f"step={step!r} must be None (the next step) or an int >= 0")
        if self._local_spec is None:
            self._local_spec = local_spec(self._pipeline, self.plan, self.config.pad)
        return global_spec(self._local_spec, self.plan if self._schedule is None else
                           self._schedule.plan_at(step_of(self._position) if step is None
                                                  else step), self.layout)

    def records(self, *, all_processes: bool = False,
                clear: bool = False) -> list[dict[str, Any]]:
        """Per step handed out, the values of the ``record=`` feature each loading group
        contributed (real rows only), in step order: ``{"pass": 0, "step": 3, "ids": {0: [...],
        1: [...]}}`` with ``ids`` keyed by loading group (``shard_index``). Host-side: no device
        work. See :mod:`jaxload._src.records`.

        By default this process's group only; with ``all_processes=True`` (every process calls it
        at the same point) process 0 gets every group's ids. ``clear=True`` forgets the steps
        returned, to log them in chunks.

        Example:
          >>> import grain
          >>> ds = grain.MapDataset.range(64).map(lambda i: {"id": np.int32(i)})
          >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=16,
          ...                             record="id")
          >>> for batch in loader:
          ...     pass
          >>> loader.records(all_processes=True)[-1]
          {'pass': 0, 'step': 3, 'ids': {0: [48, 49, 50, ..., 63]}}
        """
        if self._recorder.feature is None:
            raise ValueError("this loader records nothing; build it with record='<feature>' "
                             "(e.g. record='id') to get records()")
        mine = self._recorder.steps(clear=clear)
        if not all_processes:
            return mine
        name = whereabouts.CREATED.new(f"loader/{self.name}/records",
                                       f"records of loader {self.name!r} (call {{ordinal}})")
        return gather_records(mine, self.plan, self.config.timeout_s, name)

    def get_state(self) -> states.State:
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
        settle = getattr(self._pipeline, "settled", lambda position: position)  # (on demand)
        return self._described({**self._position, "position": settle(self._position["position"])})

    def _described(self, position: dict[str, Any]) -> states.State:
        return states.describe(self._pipeline.backend, self.plan, self.remainder,
                               self._pipeline.elastic, position, self._schedule)

    def set_state(self, state: states.State, *, head_start: bool = True) -> None:
        """Makes the next pass continue from ``state`` (from ``get_state``), ending one still open.

        Every process calls it; a state refused on one process raises a ValueError on all. Under
        the same plan (loading group, batch sizes) the pass continues exactly where the state's
        process stood (sharded by files, only there). Under another plan (process count,
        layout, loading groups, global batch size) a state of any process continues at its
        global row where the pipeline can start there exactly (a sharded Grain MapDataset or
        tf.data pipeline), or is refused, saying why; so is a state of another backend,
        remainder mode, dataset length or fingerprint. With ``prefetch`` > 0 the pass starts
        reading now (``head_start``): its first batch is ready while the model is restored.

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
        self._resume = agreed_resume_point(state, self._described(self._position), self._pipeline,
                                           self.name, self.config.timeout_s)
        self.close()  # a pass still open ends here: get_state now answers the restored state
        self._position = self._resume
        if head_start and self.config.prefetch:
            start, self._resume = self._resume, START
            self._ahead = self._iter_from(start)  # held until iter() hands it out
            self._ahead.start()
