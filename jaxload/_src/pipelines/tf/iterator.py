"""A tf.data pipeline's batches with the position after each, from tf.data's own iterator
checkpoints: a resume restores the iterator instead of reading everything before its position.

A position is ``{"batches": n, "saved": {"batches": m, "state": ...}}``: ``n`` batches were
handed out, and ``state`` is the iterator's checkpoint after batch ``m <= n`` (base64 of what
``tf.train.Checkpoint`` would write of it, with ``experimental_symbolic_checkpoint``: positions
only). A resume restores the checkpoint and reads the ``n - m`` batches after it again. Where
the checkpoint would hold buffers (a shuffle buffer: the pipeline is not symbolic), nothing is
saved as the pass runs: :mod:`~jaxload._src.pipelines.tf.on_demand` takes it when a state is
asked for.

A checkpoint is saved after each of the first ``_FIRST`` batches, then whenever the reading
thread's time since the last save (reading, and what the thread does between reads: agreeing,
assembling, waiting for the loop) reaches ``_RATIO`` times what a save costs: the median CPU time
of the last ``_FIRST`` saves, on the thread that saves. CPU time, not wall time: a save lasts
about 0.05-0.5 ms, and on a loaded machine one preemption in it (a scheduler quantum, several
ms) would multiply its wall time, and with it the spacing, tenfold; the median, since a
pipeline's first save (TensorFlow's first use of the ops) can cost far more. Saving then takes
about ``1/_RATIO`` (1%) of the reading thread's time. A resume re-reads the batches read
since the last save: what the reading thread read in about ``_RATIO`` saves' worth of time
(5-50 ms), however far into the pass it is. The checkpoint belongs to the thread that reads
(the read-ahead's), so it is the iterator's state right after a batch, never ahead of it.

A pipeline whose iterator tf.data cannot save (its position is a count of batches, ``int``) is
repositioned by skipping, which reads the batches skipped.

An iterator that reached its end is destroyed on a thread of its own (:func:`release`):
TensorFlow's iterator destructor cancels and joins the pipeline's threads, which here took up to
0.6 s, and the pass's last step waits for the end of every process's pipeline.
"""

from __future__ import annotations

import base64
import collections
import re
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxload._src import compat
from jaxload._src.pipelines.tf.graph import DatasetGraph
from jaxload._src.pipelines.tf.on_demand import Live
from jaxload._src.prefetch import releaser
from jaxload._src.told import warn_once
from jaxload._src.trees import HostBatch
from jaxload._src.validate import is_nonnegative_int

_RATIO = 100  # time between saves / a save's cost: saving takes at most 1% of the reading thread
# saves after the first batches, and the costs the spacing takes the median of: a pipeline's
# first save (its first trace) or one the machine delayed may cost 100 times a usual one
_FIRST = 3
_LEAST = 1e-5  # the least a save is taken to cost (s): a coarse CPU clock can read 0


def checkpointed(pipeline: Any, position: dict[str, Any] | None, *, ignore_external_state: bool,
                 live: Live | None = None, number: int | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 cost_clock: Callable[[], float] = time.thread_time,
                 ) -> Iterator[tuple[HostBatch, dict[str, Any] | int]]:
    """``pipeline``'s batches as numpy, each with the position after it, from ``position``
    (None: the start); ``clock`` times the time between saves, ``cost_clock`` the saves. With
    ``live`` (a checkpoint that holds buffers) nothing is saved as the pass runs: ``live`` takes
    a checkpoint when a state is asked for (:mod:`~jaxload._src.pipelines.tf.on_demand`), and
    its positions name the pass ``number`` (:mod:`~jaxload._src.pipelines.tf.reseed`).

    Example:
      >>> import tensorflow as tf
      >>> ds = tf.data.Dataset.range(6).batch(2)
      >>> [(b.tolist(), p["batches"]) for b, p in checkpointed(ds, None, ignore_external_state=False)]
      [([0, 1], 1), ([2, 3], 2), ([4, 5], 3)]
      >>> # each position also holds the last save: {"batches": m, "state": ...}, m <= batches
    """
    import tensorflow as tf

    owned = owning(iter(pipeline))  # the only reference to the iterator: see release()
    try:
        done, ahead = 0, []
        saved = position["saved"] if position else None
        if saved is not None:
            restore(owned[0], saved["state"])
            done, ahead = saved["batches"], saved.get("ahead", [])
        handed = (position or {}).get("batches", 0)
        if live is not None:
            batches = live.batches(owned.pop(), pipeline.element_spec, done, ahead, release=release,
                                   save=lambda iterator: save(iterator, ignore_external_state),
                                   number=number)
            for _ in range(handed - done):  # read again since the checkpoint
                next(batches, None)
            yield from batches
            return
        if ahead:
            raise ValueError("the state's tf.data position holds batches read ahead, which only a "
                             "pipeline whose checkpoint holds buffers takes: is it the pipeline the "
                             "state was taken with?")
        for _ in range(handed - done):  # read again since the checkpoint
            if next(owned[0], None) is None:
                return
        costs: collections.deque[float] = collections.deque(maxlen=_FIRST)
        since, saving = clock(), True
        while True:
            element = next(owned[0], None)
            if element is None:
                return
            handed += 1
            if saving and (len(costs) < _FIRST
                           or clock() - since >= _RATIO * max(statistics.median(costs), _LEAST)):
                started = cost_clock()
                state = save(owned[0], ignore_external_state)
                saving = state is not None
                if state is not None:
                    saved = {"batches": handed, "state": base64.b64encode(state).decode("ascii")}
                    costs.append(cost_clock() - started)
                    since = clock()
            batch = tf.nest.map_structure(np.asarray, element)
            yield batch, ({"batches": handed, "saved": saved} if saving else handed)
    finally:  # the pass's end, or a stop before it (a pass that ends at its agreed count)
        release(owned)


def counted(pipeline: Any, positions: Iterator[Any]) -> Iterator[tuple[HostBatch, Any]]:
    """``pipeline``'s batches as numpy, each with the next of ``positions`` (a count of batches
    where the iterator cannot be saved; None for the tf.data service)."""
    owned = owning(pipeline.as_numpy_iterator())
    try:
        for position in positions:
            batch = next(owned[0], None)
            if batch is None:
                return
            yield batch, position
    finally:  # the pass's end, or a stop before it (the pass ended by the agreed count)
        release(owned)


def release(owned: list[Any]) -> None:
    """Destroys the iterator in ``owned`` (its only reference) on jaxload's releasing thread
    (:data:`jaxload._src.prefetch.releaser`), so that the pass's end does not wait for
    TensorFlow to cancel and join the pipeline's threads. Safe where a thread must not be
    started (a generator closed by the garbage collector): the thread is started with the
    iterator (:func:`owning`), and the interpreter's exit waits for it.

    Example:
      >>> owned = [iter([1, 2])]
      >>> release(owned)
    """
    if owned:
        releaser.close_later(_Owned(owned))


def owning(iterator: Any) -> list[Any]:
    """``[iterator]``, the list :func:`release` takes, with the releasing thread started."""
    releaser.start()
    return [iterator]


class _Owned:
    def __init__(self, owned: list[Any]):
        self.close = owned.clear


def save(iterator: Any, ignore_external_state: bool) -> bytes | None:
    """The iterator's checkpoint; None (told once) where tf.data refuses to save it after all
    (an op with state outside the pipeline that the graph did not show): positions are then
    counts of batches, resumed by skipping."""
    import tensorflow as tf

    try:
        return compat.tf_save_iterator(iterator, ignore_external_state=ignore_external_state)
    except tf.errors.FailedPreconditionError as e:
        message = (f"tf.data cannot save this pipeline's iterator ({str(e.message)[:200]}), so a "
                   "resume re-reads every batch before its position")
        warn_once(message, stacklevel=2)
        return None


def restore(iterator: Any, state: str) -> None:
    """Puts a fresh iterator where the checkpoint ``state`` (base64) was taken; a checkpoint of
    another pipeline is refused by tf.data, named here."""
    import tensorflow as tf

    try:
        compat.tf_restore_iterator(iterator, base64.b64decode(state))
    except (tf.errors.OpError, ValueError) as e:
        raise ValueError(
            "the state's tf.data iterator checkpoint does not fit this pipeline (is it the "
            f"pipeline the state was taken with?): {str(getattr(e, 'message', e))[:300]}") from e


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch("[0-9a-f]{16}", value) is not None


def batches_of(position: Any) -> int:
    """Batches handed out at a tf.data position: a checkpointed one, or a count (a pipeline
    tf.data cannot save, or a state of an older jaxload)."""
    if isinstance(position, dict):
        return int(position["batches"])
    return int(position or 0)


def checked_batches(position: Any, proved: bool = False) -> int:
    """The batches handed out at a position of a pipeline positioned by iterator checkpoints
    or counts (None, ``n``, ``{"batches": n, "stream": digest}`` from a split that proves its
    stream, or ``{"batches": n, "saved": None or {"batches": m <= n, "state": base64}}``, with
    ``"proved": True`` from such a split and ``"pass": k`` where the checkpoint holds buffers);
    a ValueError
    naming what is wrong where it is not one, or where its checkpoint is of the other split
    than this pipeline's (``proved``: this pipeline's split proves its stream).

    Example:
      >>> checked_batches({"batches": 3, "saved": {"batches": 2, "state": ""}})
      3
      >>> checked_batches({"batches": 3, "saved": {"batches": 5, "state": ""}})
      Traceback (most recent call last):
      ...
      ValueError: the state's tf.data position must be {'batches': n, 'saved': None or ...
    """
    if position is None or is_nonnegative_int(position):  # a count of batches
        return int(position or 0)
    if isinstance(position, dict) and set(position) - {"pass"} in ({"batches", "stream"},
                                                                   {"batches"}):  # a count
        if not is_nonnegative_int(position["batches"]) or not _is_digest(position.get(
                "stream", "0" * 16)) or not is_nonnegative_int(position.get("pass", 0)):
            raise ValueError("the state's tf.data position must be {'batches': n, 'stream': 16 "
                             "hex digits} (the stream where the split proves it; with 'pass': k "
                             f">= 0 where it reshuffles), got {position!r:.160}")
        return int(position["batches"])
    if not isinstance(position, dict) or set(position) - {"proved", "pass"} != {"batches", "saved"}:
        raise ValueError("the state's tf.data position is not one this pipeline's iterator "
                         "takes (a count of batches, or an iterator checkpoint): "
                         f"{position!r:.160} (a state of another pipeline?)")
    consumed, saved = position["batches"], position["saved"]
    if "pass" in position and not is_nonnegative_int(position["pass"]):
        raise ValueError(f"the state's position['pass'] must be an int >= 0, got {position['pass']!r}")
    if not is_nonnegative_int(consumed) or not (saved is None or isinstance(saved, dict) and (
            is_nonnegative_int(saved.get("batches")) and isinstance(saved.get("state"), str)
            and saved["batches"] <= consumed and set(saved) <= {"batches", "state", "ahead"}
            and isinstance(saved.get("ahead", []), list)
            and all(isinstance(a, str) for a in saved.get("ahead", [])))):
        raise ValueError("the state's tf.data position must be {'batches': n, 'saved': None or "
                         f"{{'batches': m <= n, 'state': str, 'ahead': [str, ...] (optional)}}}}, "
                         f"got {position!r:.160}")
    if saved is not None and bool(position.get("proved")) != proved:
        taken, this = ("", "not ") if position.get("proved") else ("not ", "")
        raise ValueError(
            f"the state's tf.data iterator checkpoint was taken where the split by elements did "
            f"{taken}prove what every process read, and this loader's split does {this}prove it "
            "(checks='never' turns the proof off, as do a batch-size schedule and a padded "
            "global batch): its pipeline is another one, whose checkpoint does not fit. Pass "
            "the checks= the state was taken with")
    return consumed


def saveable(graph: DatasetGraph) -> bool | None:
    """None if tf.data cannot save the pipeline's iterator (told once, naming the op);
    otherwise whether the save ignores state outside the pipeline."""
    if graph.external_state is None:
        return graph.ignores_external_state
    message = (f"tf.data cannot save this pipeline's iterator ({graph.external_state}), so a "
               "resume re-reads every batch before its position. " + (
                   "To resume without re-reading, draw it with a stateless op seeded from the "
                   "element (tf.random.stateless_uniform(shape, seed=...))" if "decides which" in
                   graph.external_state else "If that op's state does not decide which elements "
                   "come next (a counter, a log), set options.experimental_external_state_policy"
                   " = tf.data.experimental.ExternalStatePolicy.IGNORE on the dataset"))
    warn_once(message, stacklevel=5)
    return None


def positioning(replayed: bool | None, save: bool | None, symbolic: bool) -> str:
    """What a resume of the pipeline does, in words (``loader.explain()``): ``replayed``,
    whether it is positioned by replay (:mod:`~jaxload._src.pipelines.tf.replay`) over a
    shuffle (True) or an unshuffled source (False), or not (None); ``save`` and ``symbolic``,
    how tf.data saves its iterator otherwise."""
    if replayed is not None:
        how = "replays its shuffle to its position" if replayed else (
            "skips to its position in memory")
        return f"{how} (nothing is saved as a pass runs)"
    if save is None:
        return "re-reads every batch before its position (tf.data cannot save its iterator)"
    if not symbolic:
        return ("restores tf.data's iterator checkpoint, which holds the pipeline's buffers, "
                "saved when a state is asked for (with the batches read ahead of the loop)")
    return ("restores tf.data's iterator checkpoint, positions only (symbolic), saved after "
            "batches as a pass runs, spaced by its cost")
