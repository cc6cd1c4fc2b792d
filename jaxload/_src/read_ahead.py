"""Stage 1 of a pass: this process's batches, read ahead and validated."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager as ContextManager
from typing import Any, NamedTuple, TypedDict

import jax
import numpy as np

from jaxload._src import signature
from jaxload._src.assemble import Narrowed, check_in_range, check_local_batch, narrowed
from jaxload._src.group_proof import digest
from jaxload._src.plan import Plan
from jaxload._src.protocol import Decision
from jaxload._src.records import Recorder
from jaxload._src.remainder import check_paddable, no_step_warning, undelivered_warning
from jaxload._src.stats import Stats, timed
from jaxload._src.told import warn_each, warn_once
from jaxload._src.trees import HostBatch


class Local(NamedTuple):
    """A validated per-process batch: its tree structure, numpy leaves and backend position,
    where the reader hashes batches, their digest (:func:`~jaxload._src.group_proof.digest`),
    and where the source proves what it split, the digest of the global batch it was kept from
    (:mod:`~jaxload._src.stream_proof`)."""

    treedef: Any
    leaves: list[np.ndarray]
    position: Any
    digest: str | None = None
    stream: str | None = None
    elements: bytes | None = None  # the fingerprints of that global batch's elements


def short_batch_warning(step: int, rows: int, local_batch_size: int) -> str:
    """What a batch of the pipeline's own that is short and not its last means.

    Example:
      >>> print(short_batch_warning(0, 2, 4))  # doctest: +ELLIPSIS
      the pipeline's batch at step 0 has 2 rows where local_batch_size is 4, and is not its ...
    """
    return (f"the pipeline's batch at step {step} has {rows} rows where local_batch_size is "
            f"{local_batch_size}, and is not its last: remainder='pad' pads each such batch to "
            f"{local_batch_size} rows (the padding masked out), so part of those steps is "
            "padding. Unless its batches vary in size by design (group_by_window, "
            f"bucket_by_sequence_length), batch it to local_batch_size ({local_batch_size} rows: "
            "ctx.local_batch_size, loader.plan.local_batch_size), or pass it unbatched with "
            "batched=False and jaxload batches it")


class Digests(TypedDict):
    """A report's digests of a round's batches (:meth:`ReadAhead.digests`)."""

    rows: list[str] | None
    stream: list[str] | None


class ReadAhead:
    """Stage 1: this process's batches, read ahead and validated.

    ``source`` yields ``(batch, backend position after it)``, or where it proves what it split
    ``(batch, position, (digest of the global batch, fingerprints of its elements))``; its
    optional ``length`` attribute
    is how many batches it holds (``protocol.INFINITE`` for no end), its optional
    ``describe(seed)`` what it shards, as the processes compare it
    (:mod:`~jaxload._src.same_dataset`), called before the first read with ``seed``: a number
    every process shares, another for each pass (to draw what to compare). ``watch(step, first)``
    wraps each read, so that the watchdog finds a pipeline stuck in it. ``digests``: hash each
    batch (a loading group of several processes compares them). ``whole``: the pipeline batches
    itself (``batched=True``, a ``grain.DataLoader``): a batch of fewer rows than
    ``local_batch_size`` followed by another is padded with a warning (each step part padding).
    """

    def __init__(self, source: Iterable[tuple[HostBatch, Any]], plan_at: Callable[[int], Plan],
                 pad: bool, stats: Stats,
                 first_step: int,
                 recorder: Recorder | None = None,
                 watch: Callable[[int, bool], ContextManager[None]] | None = None,
                 digests: bool = False, seed: int = 0, whole: bool = False):
        self._digests, self._pass_seed, self._whole = digests, seed, whole
        self._short_at: tuple[int, int, int] | None = None  # a short batch's step, rows, size
        self.length = getattr(source, "length", None)
        self._describe = getattr(source, "describe", None)
        self._ended = getattr(source, "ended", None)
        self.uneven = bool(getattr(source, "uneven", False))  # its own share: warn what drop
        self.dropping: Decision | None = None  # leaves out (its Decision.undelivered)
        self._described: dict[str, Any] | None = None
        self._source = iter(source)
        self._plan_at, self._pad, self._stats = plan_at, pad, stats
        self._recorder = recorder
        self.ahead: collections.deque[Local] = collections.deque()
        self.exhausted = False
        self.validating = False  # a batch read is being checked before assembly
        self.signature: str | None = None  # this pass's batch signature (JSON)
        self.digest: str | None = None
        self.nbytes = 0
        self._key: tuple[Any, tuple[tuple[str, tuple[int, ...]], ...]] | None = None
        # the plan, structure, dtypes and shapes of the last batch checked
        self._seen: tuple[Plan, Any, tuple[tuple[np.dtype, tuple[int, ...]], ...]] | None = None
        self._narrowed: Narrowed = ()  # its leaves that JAX narrows
        self.next_step = self._first_step = first_step  # the step of the next batch read
        self._watch = watch or (lambda step, first: contextlib.nullcontext())

    def fill(self, n: int) -> None:
        """Reads until ``n`` batches are ready or the pipeline ends."""
        if self._describe is not None:  # the first read: before any batch, within its watch
            with self._watch(self.next_step, True):
                self._described, self._describe = self._describe(self._pass_seed), None
        while len(self.ahead) < n and not self.exhausted:
            first = self.next_step == self._first_step
            with timed(self._stats, "backend"), self._watch(self.next_step, first):
                local, position, *stream = next(self._source, (None, None))
                if local is None or not self._pad and self._short(local) and next(
                        self._source, None) is None:  # the last batch, partial: dropped
                    self.exhausted = True
                    return
            if self._short_at is not None:  # the short batch was not the last
                warn_once(short_batch_warning(*self._short_at), key="short batches")
                self._short_at = None
            if self._whole and self._pad and self._short(local):
                self._short_at = (self.next_step, self._rows(local),
                                  self._plan_at(self.next_step).local_batch_size)
            self.validating = True
            self.ahead.append(self._validated(local, position, stream[0] if stream else None))
            self.validating = False

    def _short(self, local: HostBatch) -> bool:
        """``local`` has fewer rows than a batch (a user-batched pipeline's last batch, which
        ``remainder="drop"`` drops where it is the last; elsewhere the check refuses it)."""
        rows = self._rows(local)
        return rows is not None and rows < self._plan_at(self.next_step).local_batch_size

    @staticmethod
    def _rows(local: HostBatch) -> Any:
        """The rows of ``local``'s first leaf; None for a scalar or no leaf."""
        leaves = jax.tree_util.tree_leaves(local)
        shape = np.shape(leaves[0]) if leaves else ()
        return shape[0] if shape else None

    def at(self, s: int, held: Local | None = None) -> Local | None:
        """The batch of the round's step ``s``, ``held`` (the first step, assembled already) and
        those read ahead counted; None where this process has none there."""
        batches = self._round(held)
        return batches[s] if s < len(batches) else None

    def ended(self, held: bool) -> None:
        """Tells the source that its pass ended as the processes agreed, with the batches read
        and not handed out (its optional ``ended(unused)``: those read ahead, and the first
        step where it was ``held``, assembled before the round that ended the pass), within the
        read's watch."""
        if self._ended is not None:
            with self._watch(self.next_step, False):
                self._ended(len(self.ahead) + held)
        if self._pad:
            return
        step, plan = self.next_step - len(self.ahead) - held, self._plan_at(self.next_step)
        if self.uneven and self.dropping is not None and self.dropping.undelivered:
            warn_each(undelivered_warning(self.dropping.undelivered, step,
                                          plan.local_batch_size, self.dropping.exact,
                                          plan.loading_groups))
        elif step == self._first_step == 0:  # a whole pass, and not one step
            warn_each(no_step_warning(plan.local_batch_size))

    def take_described(self) -> dict[str, Any] | None:
        """The source's description, once (for the first round's report), then None."""
        described, self._described = self._described, None
        return described

    def digests(self, held: Local | None, rows: bool, stream: bool) -> Digests:
        """A report's digests of the round's batches (``held``: its first step, assembled
        already), in order: of their rows where ``rows``, of the global batches they were kept
        from where ``stream``; ``""`` for a padded step."""
        batches = self._round(held)
        return {"rows": [b.digest or "" for b in batches] if rows else None,
                "stream": [b.stream or "" for b in batches] if stream else None}

    def _round(self, held: Local | None) -> list[Local]:
        return [held, *self.ahead] if held is not None else list(self.ahead)

    def take(self) -> Local | None:
        """The next batch (read now if none is ahead), or None when the pipeline has ended."""
        if not self.ahead:
            self.fill(1)
        return self.ahead.popleft() if self.ahead else None

    def _validated(self, local: HostBatch, position: Any, proof: tuple[str, bytes] | None
                   ) -> Local:
        stream, elements = proof or (None, None)
        if self._pad:
            check_paddable(local)
        if self._recorder is not None:
            self._recorder.check(local)
        plan = self._plan_at(self.next_step)
        leaves, treedef = jax.tree_util.tree_flatten(local)
        # numpy leaves with the structure, dtypes and shapes of the last batch checked, under
        # the same plan, pass as it did: most batches, so that the checks cost once, not per step
        # (a tuple compares the plan by identity first; an equal plan checks the same)
        seen = (plan, treedef, tuple((a.dtype, a.shape) for a in leaves)) if all(
            type(a) is np.ndarray for a in leaves) else None
        if seen is not None and seen == self._seen:
            check_in_range(local, leaves, self._narrowed)
            self.next_step += 1
            return Local(treedef, leaves, position, digest(leaves) if self._digests else None,
                         stream, elements)
        named = check_local_batch(local, plan, partial=self._pad)
        leaves = [a for _, a in named]
        self._narrowed = narrowed(leaves)
        check_in_range(local, leaves, self._narrowed)
        key = (treedef, tuple((a.dtype.str, a.shape[1:]) for a in leaves))
        if self._key is None:
            self._key = key
            self.signature = signature.describe(jax.tree_util.tree_unflatten(treedef, leaves))
            self.digest = signature.digest(self.signature)
            self.nbytes = sum(a.nbytes for a in leaves)
        elif key != self._key and self.signature is not None:
            now = signature.describe(jax.tree_util.tree_unflatten(treedef, leaves))
            raise ValueError(
                f"the batch at step {self.next_step} differs from the first one: "
                f"{signature.differences(self.signature, now, self._first_step)}. Features need one static "
                "shape and dtype (pad or crop variable-length features in the pipeline); a "
                "changing shape would also recompile the training step.")
        self._seen = seen
        self.next_step += 1
        return Local(treedef, leaves, position, digest(leaves) if self._digests else None,
                     stream, elements)
