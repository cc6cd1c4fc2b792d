"""One pass of a loader as the training loop sees it: :class:`LoaderIterator`.

The iterator hands the pass's batches to the loop, reshards them (``load_once``) and checks them
on the loop's thread, and tells the loader the position after each batch. What the pass needs
it gets at the start in a :class:`~jaxload._src.pass_context.PassContext`, so that neither holds
the other: a pass dropped by the loop (a ``break``) is closed at once. What the iterator does for
its loader it gets in a :class:`LoopSide` (the loader's name, layout and reshard, and where to
report the position), so that it needs no :class:`~jaxload.Loader` of its own.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any

import jax

from jaxload._src import check, failures
from jaxload._src.agreement import PeerFailedError
from jaxload._src.layout import Layout
from jaxload._src.pass_context import LoopFailure, PassContext
from jaxload._src.passes import Handout, Pass
from jaxload._src.prefetch import Prefetched, closer, prefetched
from jaxload._src.schedule import next_pass
from jaxload._src.stage import Stage
from jaxload._src.state import START
from jaxload._src.stats import timed
from jaxload._src.trees import GlobalBatch, HostBatch


@dataclasses.dataclass(frozen=True)
class LoopSide:
    """What the iterator does for its loader on the loop's thread.

    Attributes:
      name: the loader's name, which names the exchanges of its checks.
      layout: what the checks compare across processes, and what a failed reshard still
        places its zeros on.
      reshard: moves a batch to ``layout`` (``load_once``), or None.
      handed_out: told the loader's position after each batch handed out (and at the end).
      after_pass: the backend position where the pass after the one ending at a backend
        position starts (a reshuffling pipeline's next pass), or None: the pipeline's optional
        ``Pipeline.after_pass``.
    """

    name: str
    layout: Layout
    reshard: Callable[[GlobalBatch], GlobalBatch] | None
    handed_out: Callable[[dict[str, Any]], None]
    after_pass: Callable[[Any], Any] | None = None


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

    def __init__(self, loop: LoopSide, context: PassContext,
                 source: Iterable[tuple[HostBatch, Any]]):
        self._loop, self._context = loop, context
        self._at: dict[str, Any] = context.start  # the position after the last handout
        config, dog = context.config, context.watchdog
        dog.start()  # here, not in __del__: a finalizer must not start threads
        dog.opened(context.exchange.prefix, config.on_failure, float(config.exit_grace_s))
        self._begun = _Begun(Pass(context, source, loop.layout if loop.reshard is None else None))
        stats, prefix = context.stats, context.exchange.prefix

        def count_ready(n: int) -> None:
            stats.ready_sum += n

        self._items: Prefetched[Handout] | Generator[Handout, None, None] = (
            prefetched(self._begun.handouts, config.prefetch, on_request=count_ready,
                       interrupt=lambda: dog.interruption(prefix))
            if config.prefetch else self._begun.handouts())
        self._closed = False
        self._last = time.perf_counter()
        closer.start()  # here, not in __del__: a finalizer must not start threads

    def __iter__(self) -> LoaderIterator:
        return self

    def start(self) -> None:
        """Starts reading (and agreeing, assembling) in the background now, before the first
        ``next()``, where the loader prefetches; else does nothing."""
        if isinstance(self._items, Prefetched) and not self._closed:
            self._items.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def __next__(self) -> GlobalBatch:
        if self._closed:
            raise StopIteration
        context = self._context
        asked = time.perf_counter()
        interruption = context.watchdog.interruption(context.exchange.prefix)
        if interruption is not None:  # a peer failed (or this pipeline is stuck): no RPC here
            self.close()
            raise interruption
        context.waiting.set()
        try:
            handout = next(self._items)
        except StopIteration:
            # a pass of known length has no round at its end: a peer's failure announced while
            # this process handed out its last batches is raised here, not lost with the pass
            interruption = context.watchdog.interruption(context.exchange.prefix)
            self._ended()
            if interruption is not None:
                raise interruption from None
            # a finished pass: the next one starts at row 0 (and a schedule goes on), of the
            # pass after this one where the pipeline tells (a state taken now resumes there)
            after = START if context.schedule is None else next_pass(self._at, START)
            if self._loop.after_pass is not None:
                after = {**after, "position": self._loop.after_pass(self._at["position"])}
            self._loop.handed_out(after)
            raise
        except BaseException:
            self._ended()  # the pass reported the failure itself
            raise
        finally:
            context.waiting.clear()
        batch = self._on_loop_side(handout)
        context.recorder.handed_out(handout.step)
        self._at = {**context.start, **handout.position}  # and the origin
        self._loop.handed_out(self._at)
        now, stats = time.perf_counter(), context.stats
        stats.steps += 1
        stats.waited(now - asked)
        stats.elapsed_s += now - self._last
        stats.nbytes += handout.nbytes
        self._last = now
        return batch

    def _on_loop_side(self, handout: Handout) -> GlobalBatch:
        """Reshards (``load_once``) and checks a batch on the loop's thread: both are
        collectives, issued here in program order with the training step's own."""
        batch, stats = handout.batch, self._context.stats
        if self._loop.reshard is not None:
            with timed(stats, "assemble"):
                batch = self._resharded(handout)
        if handout.checks:
            with timed(stats, "check"):
                self._check(handout.checks, batch)
        return batch

    def _check(self, checks: str, batch: GlobalBatch) -> None:
        loop, context = self._loop, self._context
        timeout_s = context.config.timeout_s
        # one series per pass (its checks are counted in it): what this process remembers of
        # the exchanges it created stays one entry per pass
        at = f"{loop.name}.pass{context.exchange.name.ordinal}"
        try:
            if checks.startswith("plan+"):
                check.plan_and_batch(loop.layout, context.plan.global_batch_size, batch,
                                     timeout_s=timeout_s, name=at,
                                     distinct=checks == "plan+batch")
            elif checks == "replication":
                check.replication(batch, timeout_s=timeout_s, name=at)
            else:
                check.batch(batch, timeout_s=timeout_s, name=at)
        except Exception:
            # a check is an exchange of its own: its verdict, or a process's failure to
            # compute it, reached every process already
            self.close()
            raise

    def _resharded(self, handout: Handout) -> GlobalBatch:
        """The ``load_once`` reshard, a collective of every process.

        A process whose reshard fails says so at once (:meth:`Exchange.mark_failed`), then
        still joins the collective, with zeros, so that no other process is left inside it;
        the others read that mark after their reshard returns and raise instead of handing
        the batch out (with XLA:CPU's synchronous collectives that read always sees the mark;
        where dispatch is asynchronous the round after the window reports it in any case).
        """
        reshard, context = self._loop.reshard, self._context
        assert reshard is not None
        try:
            batch: GlobalBatch = reshard(handout.batch)
        except Exception as e:
            self._fail_reshard(e, handout)
            raise
        failed = context.exchange.failed()
        if failed is not None:
            self.close()
            raise PeerFailedError(failed)
        return batch

    def _fail_reshard(self, error: Exception, handout: Handout) -> None:
        context = self._context
        failure = failures.Failure(jax.process_index(), Stage.RESHARDING, handout.step,
                                   f"{type(error).__name__}: {error}", context.exchange.prefix)
        context.watchdog.publish(failure, error)  # also what the others read after the collective
        failures.add_note(error, f"jaxload: {failure.text} (told every process)")
        try:
            zeros = jax.tree_util.tree_map(jax.numpy.zeros_like, handout.batch)
            jax.device_put(zeros, self._loop.layout.shardings(zeros))
        except Exception:  # noqa: BLE001 - the original failure is what is raised
            pass
        context.failure = LoopFailure(error, Stage.RESHARDING, handout.step)
        self.close()

    def close(self) -> None:
        """Ends this pass on this process; the others end it at their next round.

        Idempotent; also called by ``with``, the next ``iter(loader)`` and ``loader.close()``.
        """
        if self._closed:
            return
        self._ended()
        self._items.close()
        self._begun.close()

    def _ended(self) -> None:
        self._closed = True
        self._context.watchdog.closed(self._context.exchange.prefix)

    def __enter__(self) -> LoaderIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped without close() (a `break` out of a for loop): closing may exchange with the
        # other processes, which must not happen inside a finalizer, so a thread does it.
        if not getattr(self, "_closed", True):
            self._ended()
            closer.close_later(self._items)
            closer.close_later(self._begun)


class _Begun:
    """A pass begun once: by its first step, or at its close if that comes first (an iterator
    closed before its first ``next()``, or told of a peer's failure there). Then the pass is
    stopped at the close all the same, so that the others end it and its keys go."""

    def __init__(self, run: Pass) -> None:
        self._run, self._lock, self._taken = run, threading.Lock(), False

    def _take(self) -> bool:
        with self._lock:
            taken, self._taken = self._taken, True
        return not taken

    def handouts(self) -> Generator[Handout, None, None]:
        if self._take():
            yield from self._run

    def close(self) -> None:
        """After the handouts' own close: stops the pass if it never began."""
        if self._take():
            self._run.stop()
