"""The Loader: per-process numpy batches in, global ``jax.Array`` batches out, in lockstep.

Before steps are handed out, all processes exchange a short report (:mod:`jaxload.agreement`):
how many batches each has read ahead, their structure, shapes and dtypes, or the error its
pipeline raised. From the same reports every process takes the same decision: how many steps
exist, whether to end the epoch (see :mod:`jaxload.remainder`), or to raise. So a process that
runs out of data early never leaves the others blocked in a collective, and a process that fails
stops the others with its error. One exchange covers a window of up to 16 steps.

``get_state``/``set_state`` record and restore where a pass stands: the backend's position, for an
exact resume on the same plan, and the global row position, for a resume on another topology
(:mod:`jaxload.state`); an adapter supplies how its pipeline starts at a global row
(:class:`jaxload.state.Elastic`). :mod:`jaxload.checkpoint` puts the state in Orbax checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from jaxload import agreement, check
from jaxload import state as states
from jaxload.assemble import build_global, check_local_batch
from jaxload.layouts import Layout, Plan
from jaxload.prefetch import prefetched
from jaxload.remainder import (
    DROP,
    PAD,
    check_paddable,
    check_remainder,
    decode_template,
    encode_template,
    pad_rows,
)
from jaxload.stats import Stats, StatsSummary, gather, timed

PyTree = Any

DEFAULT_TIMEOUT_S = 600.0
_START = states.START
_MAX_WINDOW = 16  # steps agreed on in one exchange, at most
_WINDOW_BYTES = 256 * 2**20  # per-process batches read ahead for one exchange, at most


class Loader:
    """An iterable of global batches (pytrees of ``jax.Array``), one pass per ``iter()``.

    Built by :func:`jaxload.from_tf_data` or :func:`jaxload.from_grain`. Every process must
    iterate every loader in the same order (as with any multi-process JAX computation).

    Attributes:
      layout: the layout the batches are placed on.
      plan: this process's loading plan (``shard_index``, ``local_batch_size``, ...).
      remainder: ``"drop"`` or ``"pad"`` (see :mod:`jaxload.remainder`).
      prefetch: how many global batches are assembled ahead on a background thread while the
        training step runs (0: none, everything happens in ``next()``).

    With ``checks="first"`` (the default) the first step of each pass also verifies that every
    process built the same layout (:func:`jaxload.check.plan`) and that the batch is placed right
    (:func:`jaxload.check.batch`: replicas identical, different row blocks distinct); ``checks=N``
    repeats the batch check every N steps, ``checks="never"`` turns them off. Measured cost
    (``benchmarks/check_cost.py``, 2 processes x 4 CPU devices on a 2-core machine): about 6 ms
    per batch check of a 3 MiB global batch and 2 ms for the plan check.

    Example:
      >>> loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=64)
      >>> for batch in loader:
      ...     state = train_step(state, batch)
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
    ):
        """``local_batches(position)`` starts a pass at a backend position (None: the start) and
        yields this process's numpy batches, each with the backend position after it (JSON).
        ``not_resumable``: why ``set_state`` cannot work with this backend, if it cannot.
        ``elastic``: how the pipeline starts at a global row, for a state from another topology
        (:class:`jaxload.state.Elastic`)."""
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
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
                         else lambda batch: jax.device_put(batch, layout.sharding))
        self._backend = backend
        self._timeout_s = timeout_s
        self._not_resumable = not_resumable
        self._elastic = elastic
        self._id = agreement.next_loader_id()
        self._passes = 0
        self._summaries = 0  # stats(all_processes=True) calls, each one exchange
        self._stats = Stats(jax.process_index())
        # where the current (or next) pass stands: step, origin (the global row its pipeline
        # started at), backend position
        self._position = _START
        self._resume = _START  # where the next pass starts

    def __repr__(self) -> str:
        p = self.plan
        return (
            f"Loader(global_batch_size={p.global_batch_size}, local_batch_size="
            f"{p.local_batch_size}, shard_index={p.shard_index}, shard_count={p.shard_count}, "
            f"remainder={self.remainder!r})"
        )

    def __iter__(self) -> Iterator[PyTree]:
        start, self._resume = self._resume, _START
        self._position = start
        produce = lambda: self._global_batches(start)  # noqa: E731
        if not self.prefetch:
            return self._handed_out(produce())

        def count_ready(n: int) -> None:
            self._stats.ready_sum += n

        return self._handed_out(prefetched(produce, self.prefetch, on_request=count_ready))

    def _handed_out(self, items: Iterator[tuple[PyTree, dict, int, str]]) -> Iterator[PyTree]:
        """The consumer side (the loop's thread): reshards (``load_once``) and checks each batch
        as it is handed out, records its position, so that ``get_state`` describes what was
        consumed, not what was prefetched, and how long the loop waited for it."""
        stats, last = self._stats, time.perf_counter()
        while True:
            asked = time.perf_counter()
            item = next(items, None)
            if item is None:
                break
            batch, position, nbytes, checks = item
            if self._reshard is not None:
                with timed(stats, "assemble"):
                    batch = self._reshard(batch)
            if checks:
                with timed(stats, "check"):
                    if checks == "plan+batch":
                        check.plan(self.layout, self.plan.global_batch_size,
                                   timeout_s=self._timeout_s)
                    check.batch(batch, timeout_s=self._timeout_s)
            now = time.perf_counter()
            self._position = position
            stats.steps += 1
            stats.wait_s += now - asked
            stats.elapsed_s += now - last
            stats.nbytes += nbytes
            last = now
            yield batch
        self._position = _START  # a finished pass: the next one starts from the beginning

    def stats(self, *, all_processes: bool = False) -> Stats | StatsSummary:
        """Where this loader's time went, since it was created (see :mod:`jaxload.stats`).

        Returns this process's :class:`~jaxload.stats.Stats`, or with ``all_processes=True``
        a :class:`~jaxload.stats.StatsSummary` of every process naming the slowest; that form
        exchanges the numbers, so every process must call it at the same point.

        Example:
          >>> for batch in loader: ...
          >>> print(loader.stats(all_processes=True))
        """
        mine = dataclasses.replace(self._stats)
        if not all_processes:
            return mine
        self._summaries += 1
        return gather(mine, f"{self._id}.stats.{self._summaries}", self._timeout_s)

    def get_state(self) -> dict:
        """The position after the last batch handed out, as a JSON-serializable dict.

        It holds this loading group's backend position and the global row position ``rows``
        (rows of the pipeline's global order consumed: the same on every process). Save it, e.g.
        with :mod:`jaxload.checkpoint` in an Orbax checkpoint, and give it to ``set_state`` of a
        fresh loader over the same pipeline: on the same topology it continues with the same
        batches on every process; on another one at the same global row (see
        :mod:`jaxload.state`).

        Example:
          >>> state = loader.get_state()
          >>> json.dump(state, open(f"ckpt/loader_{jax.process_index()}.json", "w"))
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
          >>> loader.set_state(json.load(open("ckpt/loader_0.json")))
        """
        self._resume = states.resume_point(state, self.get_state(), self._not_resumable,
                                           self._elastic)

    def _global_batches(self, start: dict) -> Iterator[tuple[PyTree, dict, int, str]]:
        """One pass: agree on the next steps, assemble them, check them (the prefetch producer).

        Processes agree on a *window* of steps at a time: each reads up to ``window`` batches
        ahead and reports how many it has, so one exchange covers several steps. The window
        starts at 1 and doubles up to ``_MAX_WINDOW`` steps (and ``_WINDOW_BYTES`` of buffered
        batches), which keeps the first step prompt and the steady-state cost per step small.
        """
        exchanges = agreement.StepAgreement(f"{self._id}.{self._passes}", self._timeout_s)
        self._passes += 1
        local_batches = self._elastic.pipeline(start, self._local_batches)
        position = start["position"]
        pad = self.remainder == PAD
        # In "pad" mode a process sends a zero-row copy of its batch the first time its
        # signature appears, so that a process whose data has run out can build zero padding.
        template, sent, first = None, None, None
        step, window, exhausted = start["step"], 1, False
        first_step = step
        stats = self._stats
        for round_index in range(2**63):
            ahead: list[tuple[PyTree, list[np.ndarray], Any]] = []  # batch, leaves, position
            try:
                while len(ahead) < window and not exhausted:
                    with timed(stats, "backend"):
                        local, after = next(local_batches, (None, None))
                        if local is None:
                            exhausted = True
                            break
                        signature, leaves = self._validated(local)
                    first = first or signature
                    if signature != first:
                        raise ValueError(_shape_change(first, signature, step + len(ahead)))
                    ahead.append((local, leaves, after))
                report: dict = {"steps": len(ahead)}
                if ahead:
                    report["signature"] = first
                    report["nbytes"] = sum(leaf.nbytes for leaf in ahead[0][1])
                    if pad and first != sent:
                        report["template"], sent = encode_template(ahead[0][0]), first
            except Exception as e:
                failed = {"error": f"{type(e).__name__}: {e}", "step": step + len(ahead)}
                exchanges.exchange(round_index, json.dumps(failed))
                raise
            with timed(stats, "agree"):
                reports = {p: json.loads(r)
                           for p, r in exchanges.exchange(round_index, json.dumps(report)).items()}
            count, more = _agreed_steps(reports, step, window, pad)
            if pad:
                template = next((r["template"] for r in reports.values() if "template" in r),
                                template)
            for i in range(count):
                if i < len(ahead):
                    local, leaves, position = ahead[i]
                else:  # this process's data has run out: padding
                    local, leaves = decode_template(template), None
                with timed(stats, "assemble"):
                    if pad:
                        local = pad_rows(local, self.plan.local_batch_size)
                        leaves = jax.tree_util.tree_leaves(local)
                    batch = build_global(jax.tree_util.tree_structure(local), leaves, self.plan)
                checks = ""
                if self._check_period and (step == first_step or step % self._check_period == 0):
                    checks = "plan+batch" if step == first_step else "batch"
                nbytes = sum(leaf.nbytes for leaf in leaves)
                try:
                    yield batch, {**start, "step": step + 1, "position": position}, nbytes, checks
                except GeneratorExit:
                    # Stopped early (break, or interpreter exit): the other processes expect
                    # this one at the next exchange; tell them this pass is over.
                    if more:
                        exchanges.exchange(round_index + 1, json.dumps({"stopped": True}))
                    raise
                step += 1
            if not more:
                return
            # from the reports, not local state, so every process picks the same window
            nbytes = max(r.get("nbytes", 1) for r in reports.values())
            window = max(1, min(2 * window, _MAX_WINDOW, _WINDOW_BYTES // max(nbytes, 1)))

    def _validated(self, local: PyTree) -> tuple[str, list[np.ndarray]]:
        """Validates this process's batch: its signature (features' names, dtypes, row shapes)
        and its leaves as numpy arrays."""
        if self.remainder == PAD:
            check_paddable(local)
        named = check_local_batch(local, self.plan, partial=self.remainder == PAD)
        signature = ";".join(f"{n}:{a.dtype}{list(a.shape[1:])}" for n, a in named)
        return signature, [a for _, a in named]


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


def _shape_change(first: str, now: str, step: int) -> str:
    before, after = dict(f.rsplit(":", 1) for f in first.split(";")), dict(
        f.rsplit(":", 1) for f in now.split(";"))
    changed = [f"feature {n} was {before.get(n, 'absent')} at step 0 but is {after.get(n, 'absent')}"
               for n in sorted(set(before) | set(after)) if before.get(n) != after.get(n)]
    return (f"the batch at step {step} differs from the first one: {'; '.join(changed)}. "
            "Features need one static shape and dtype (pad or crop variable-length features "
            "in the pipeline); a changing shape would also recompile the training step.")


def _agreed_steps(reports: dict[int, dict], step: int, window: int, pad: bool) -> tuple[int, bool]:
    """How many of the next steps exist, and whether more may follow: the same on every process.

    Raises if a process failed, or if the processes' batches differ in structure, shape or dtype.
    """
    if any("stopped" in r for r in reports.values()):  # a process stopped iterating early
        return 0, False
    failed = {p: r for p, r in reports.items() if "error" in r}
    if failed:
        p, r = min(failed.items())
        raise RuntimeError(f"process {p} failed while loading step {r['step']}: {r['error']}")
    kinds: dict[str, list[int]] = {}
    for p, r in sorted(reports.items()):
        if r["steps"]:
            kinds.setdefault(r["signature"], []).append(p)
    if len(kinds) > 1:
        described = "\n".join(f"  processes {ps}: {sig}" for sig, ps in kinds.items())
        raise ValueError(
            f"at step {step} the processes' batches differ in structure, feature shapes or "
            f"dtypes (shapes shown without the batch dim), so they cannot form one global "
            f"batch:\n{described}"
        )
    counts = [r["steps"] for r in reports.values()]
    if pad:  # go on while any process has data; the others pad
        return max(counts), max(counts) == window
    return min(counts), min(counts) == window
