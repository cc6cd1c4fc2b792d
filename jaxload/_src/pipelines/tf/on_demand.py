"""tf.data iterator checkpoints that hold buffers, taken only when a state is asked for.

Where a pipeline's iterator cannot be checkpointed as positions only (a shuffle that is not
replayed, an op with state of its own: see :meth:`DatasetGraph.symbolic
<jaxload._src.pipelines.tf.graph.DatasetGraph.symbolic>`), tf.data's checkpoint holds the
buffered elements: a shuffle buffer of decoded images is hundreds of megabytes. Nothing is
saved as a pass runs. Each batch's position is a count tagged with its pass (``{"batches": n,
"saved": None, "live": token}``), and :meth:`Live.settled`, called by ``get_state``, takes
the checkpoint then, from the pass's iterator. That iterator is ahead of the batches handed out
by those read and not handed out yet (the read-ahead, the batches assembled ahead): the state
holds those batches too, and a resume hands them out before reading on. So the position is
``{"batches": n, "saved": {"batches": n, "state": base64, "ahead": [base64, ...]}}``.

The iterator is kept after its pass ends or is left (a ``break``), until the next pass of the
pipeline starts, so that a state asked after the loop still finds it. Where it is gone (another
pass started) or the batches after ``n`` were not kept, the position is a count: a resume re-reads
the batches before it, exactly, and slowly.

Example:
  >>> import tensorflow as tf
  >>> ds = tf.data.Dataset.range(40).shuffle(40, seed=1).filter(lambda x: x >= 0).batch(4)
  >>> live = Live()
  >>> from jaxload._src.pipelines.tf.iterator import release, save
  >>> batches = live.batches(iter(ds), ds.element_spec, 0, [], release=release,
  ...                        save=lambda iterator: save(iterator, ignore_external_state=False))
  >>> first = [next(batches) for _ in range(3)]          # read ahead: 3 read, 1 handed out
  >>> live.handed(first[0][1])
  >>> settled = live.settled(first[0][1])
  >>> settled["batches"], settled["saved"]["batches"], len(settled["saved"]["ahead"])
  (1, 1, 2)
"""

from __future__ import annotations

import base64
import collections
import contextlib
import io
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxload._src.told import warn_once
from jaxload._src.trees import HostBatch

# batches read and not handed out, kept for a state: more than a pass reads ahead of the loop
# (protocol.MAX_KNOWN_WINDOW, the batches assembled ahead); those handed out are let go
_KEEP = 1024
_WAIT_S = 60.0  # how long a state waits for a read in progress before it is a count instead
_TOLD_BYTES = 1 << 20  # a state holding more buffered bytes than this says how many, once
_TOKENS = itertools.count(1)


class Live:
    """A pipeline's current (or last) pass's iterator, and the batches last read from it, so
    that :meth:`settled` can checkpoint it at any batch handed out. One per pipeline; each
    pass's :meth:`batches` replaces the last pass's iterator."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._iterator: list[Any] = []  # the only reference to the iterator (see release)
        self._recent: collections.deque[tuple[int, HostBatch]] = collections.deque(maxlen=_KEEP)
        self._read = 0
        self._token = 0
        self._save: Callable[[Any], bytes | None] = lambda iterator: None

    def batches(self, iterator: Any, spec: Any, done: int, ahead: list[str], *,
                save: Callable[[Any], bytes | None], release: Callable[[list[Any]], None],
                number: int | None = None) -> Iterator[tuple[HostBatch, dict[str, Any]]]:
        """The batches of ``iterator`` (``done`` batches into its pass; ``spec``: its element
        spec), after the ``ahead`` ones of a resumed state, each with its position; ``save``
        checkpoints an iterator, ``release`` destroys the one in a list it is given; ``number``:
        the pass's, which each position names (``"pass"``) where given."""
        import tensorflow as tf

        with self._lock:
            release(self._iterator)  # the last pass's, on a thread of its own
            self._iterator = [iterator]
            self._token, self._read = next(_TOKENS), done + len(ahead)
            self._recent.clear()
            self._recent.extend((done + i, decoded(a, spec)) for i, a in enumerate(ahead, 1))
            self._save = save
            token, pending = self._token, collections.deque(self._recent)
        tagged = {} if number is None else {"pass": number}
        while True:
            if pending:
                count, batch = pending.popleft()
            else:
                with self._lock:
                    if self._token != token:  # a later pass of the pipeline took over
                        return
                    element = next(self._iterator[0], None)
                    if element is None:  # kept until the next pass: a state at the end
                        return
                    batch = tf.nest.map_structure(np.asarray, element)
                    self._read += 1
                    count = self._read
                    self._recent.append((count, batch))
            yield batch, {"batches": count, "saved": None, "live": token, **tagged}

    def handed(self, position: Any) -> None:
        """Told (on the loop's thread) the position after each batch handed out: the batches
        up to it are let go."""
        if isinstance(position, dict) and position.get("live") == self._token:
            with contextlib.suppress(IndexError):  # (a pass that starts clears them)
                while self._recent[0][0] <= position["batches"]:
                    self._recent.popleft()  # (only this thread takes from the left)

    def settled(self, position: Any) -> Any:
        """``position`` as a state keeps it: a position of a pass of this pipeline with the
        checkpoint taken now; a count (re-read on resume) where that cannot be; any other
        position as it is."""
        if not isinstance(position, dict) or "live" not in position:
            return position
        handed, saved = position["batches"], None
        if self._lock.acquire(timeout=_WAIT_S):
            try:
                ahead = [batch for count, batch in self._recent if count > handed]
                if (self._token == position["live"] and self._iterator
                        and len(ahead) == self._read - handed):
                    state = self._save(self._iterator[0])
                    if state is not None:
                        saved = {"batches": handed, "state": base64.b64encode(state).decode("ascii"),
                                 "ahead": [encoded(batch) for batch in ahead]}
            finally:
                self._lock.release()
        if saved is not None:
            size = len(saved["state"]) + sum(len(a) for a in saved["ahead"])
            if size > _TOLD_BYTES:
                warn_once(f"this tf.data pipeline's state holds its buffers (a shuffle buffer, "
                          f"batches read ahead): {size / 1e6:.0f} MB here, taken when the state "
                          "is asked for. jaxload.checkpoint writes them beside the state's JSON; "
                          "a seeded shuffle right above an in-memory source or file names is "
                          "replayed instead (a few bytes: see loader.explain())", stacklevel=4,
                          key="on_demand.size")
        return {**{k: v for k, v in position.items() if k != "live"}, "saved": saved}


def encoded(batch: HostBatch) -> str:
    """A batch's leaves as base64 of an ``.npz`` (no pickles: text leaves as bytes)."""
    import tensorflow as tf

    leaves = [np.asarray(leaf) for leaf in tf.nest.flatten(batch)]
    out = io.BytesIO()
    np.savez(out, *[leaf.astype(bytes) if leaf.dtype == object else leaf for leaf in leaves])
    return base64.b64encode(out.getvalue()).decode("ascii")


def decoded(text: str, spec: Any) -> HostBatch:
    """The batch :func:`encoded` gave ``text``, in the structure of ``spec``; a ValueError
    where it is not one."""
    import tensorflow as tf

    try:
        with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as npz:
            leaves = [npz[f"arr_{i}"] for i in range(len(npz.files))]
        flat = tf.nest.flatten(spec)
        leaves = [leaf.astype(object) if s.dtype == tf.string else leaf
                  for leaf, s in zip(leaves, flat, strict=True)]
        batch: HostBatch = tf.nest.pack_sequence_as(spec, leaves)
        return batch
    except (ValueError, TypeError, KeyError, OSError) as e:
        raise ValueError(f"the state's tf.data position holds a batch read ahead that does not "
                         f"fit this pipeline ({str(e)[:160]}): is it the pipeline the state was "
                         "taken with?") from e
