"""A shuffled tf.data pipeline positioned by replay, not by saving its shuffle buffer.

tf.data cannot checkpoint a ``shuffle`` without its buffer (4,096 images of 12 KB: a 50 MB
checkpoint), so saving the iterator as a pass goes costs the reading thread tens of
milliseconds a save and makes a state of that size. Yet what a seeded shuffle hands out at
element ``p`` of a pass depends only on its seeds, its input's order and ``p``. So where a
pipeline reads

    input.shuffle(B, seed)  then any of .map(f), .prefetch(n), .with_options(o)

and ``input`` gives the same order on every pass (no other shuffle, no op that hands out
elements in the order they are ready), its position is a few counts: the pass, the shuffle's
seeds and the elements handed out. Nothing is saved while the pass runs. A resume rebuilds the
pipeline with ``skip(p)`` right after the shuffle: the shuffle draws ``p`` elements (in memory,
microseconds each) and the ops above it run only for the elements after them. (A random
augmentation above the shuffle then draws other values than the interrupted pass would have,
as after any resume of tf.data: its checkpoints do not hold random ops' state either.)

jaxload rebuilds the shuffle (the same buffer size and seeds, a seed generator of its own) and
the ops above it (their traced functions unchanged), so its pass ``n`` has the order of the
``n``-th iteration of the user's pipeline. The ``map``\\ s under the shuffle that draw nothing
(a decode, a parse) are moved over it (:mod:`~jaxload._src.pipelines.tf.shuffle`): the elements
skipped are then read, not decoded. Passes are counted per user shuffle, as TensorFlow
counts iterators per dataset: a loader built per epoch over the same ``ds`` reshuffles as a kept
one does. An unseeded shuffle gets seeds drawn once per process, recorded in the position.

The same holds without a shuffle where the source is in memory (``from_tensor_slices``,
``range``: tf.data skips it in place). Split by elements, a loading group's ``shard(K, k)`` is
taken right after the shuffle (or the source), so the maps over it run for its share only;
split by files, each group's twin shuffles the records of its own files (TensorFlow's FILE
rewrite of the shuffle's input).

Example:
  >>> import tensorflow as tf
  >>> ds = tf.data.Dataset.range(8).shuffle(8, seed=1).map(lambda x: 10 * x)
  >>> replay = Replay.of(ds)
  >>> number, shuffled = replay.passes.start(None, None)
  >>> whole = [int(x) for x in replay.dataset(shuffled, 0)]
  >>> whole == [int(x) for x in ds]                  # the user's first pass
  True
  >>> number, shuffled = replay.passes.start(0, None)  # pass 0 again, from element 5
  >>> [int(x) for x in replay.dataset(shuffled, 5)] == whole[5:]
  True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jaxload._src import compat
from jaxload._src.pipelines.tf.graph import (
    RANDOM_VALUES,
    DatasetGraph,
    attr,
    functions_of,
    unordered,
)
from jaxload._src.pipelines.tf.read import with_options_of
from jaxload._src.pipelines.tf.shuffle import PASSES, PASSES_LOCK, Passes, names_shuffle
from jaxload._src.pipelines.tf.split import under
from jaxload._src.validate import is_nonnegative_int

# dataset ops of an input that can give another order on another pass (or process): a shuffle
# below the one replayed, Dataset.random, and the ops that hand out elements as they are ready
_REORDERING = ("Shuffle", "RandomDataset")
_VALUES_ONLY = frozenset({"MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2"})


@dataclasses.dataclass(frozen=True)
class Replay:
    """How to rebuild a pipeline over its shuffle's rebuilt twin, positioned after a number of
    its elements.

    Attributes:
      above: the ops over the shuffle, each as a function applying it to another input, in
        the order they apply.
      passes: the passes of the shuffle (:class:`Passes`), shared by every loader of it.
      user: the user's pipeline, whose options the rebuilt one takes.
      repeat: ``(where, count, length)`` of a ``repeat`` over the shuffle: the number of ops
        of ``above`` under it, its count (-1: without end), and the elements of each
        repetition. Each repetition is another iterator of the shuffle: another order.
      grouped: the shuffle's elements in each of the pipeline's: the size of a ``batch`` over
        the shuffle (the user's own batches, ``batched=True``), else 1.
    """

    above: tuple[Callable[[Any], Any], ...]
    passes: Passes
    user: Any = dataclasses.field(default=None, repr=False)  # the user's pipeline
    repeat: tuple[int, int, int] | None = None
    grouped: int = 1

    @classmethod
    def of(cls, ds: Any, graph: DatasetGraph | None = None,
           split: tuple[int, int] | None = None) -> Replay | None:
        """The replay of ``ds``, or None where its shape is not the one above. ``graph``: its
        graph, where read already (it tells whether the shuffle's input keeps its order from
        pass to pass, and whether a parallel op hands out elements as they are ready);
        ``split``: ``(K, k)`` where the shuffle's input is split by files, as TensorFlow's FILE
        rewrite splits the whole pipeline (the ops over the shuffle read no files): the
        shuffle of loading group ``k`` shuffles the records of its own files."""
        above: list[Callable[[Any], Any]] = []
        node: Any = ds
        found: tuple[Any, int | None, int, int, bool] | None = None
        repeat: tuple[int, int] | None = None  # (ops over it, count)
        grouped = 1
        while found is None:
            kind, op = compat.tf_op(node)
            if kind == "shuffle":
                found = op
            elif kind == "one_to_one":
                node, again = op
                above.append(again)
            elif kind == "repeat" and grouped == 1:
                if repeat is not None:
                    return None
                node, repeat = op[0], (len(above), op[1])
            elif kind == "batch" and repeat is None and grouped == 1:  # one, no repeat under it
                node, again, grouped = op
                above.append(again)
            elif kind in ("slices", "range"):
                found = (node, None, 0, 0, False)  # unshuffled, in memory
            else:
                return None
        graph = graph if graph is not None else DatasetGraph.of(ds)
        shuffles = 0 if found[1] is None else 1 + (names_shuffle(found[0]) is not None)
        if not keeps_its_order(graph, shuffles=shuffles):
            return None
        source, *rest = found
        if found[1] is None:  # unshuffled: every pass is the same (nothing to count)
            return None if repeat else cls(tuple(reversed(above)), Passes((source, *rest)), ds,
                                           grouped=grouped)
        with PASSES_LOCK:  # counted per user shuffle (its input, not itself, held)
            own = PASSES.setdefault(node, {})
            if split not in own:  # (the shuffle's input's graph: split without reading it)
                own[split] = Passes((source, *rest), split, under(
                    graph.graph, len(above) + (repeat is not None) + 1, "ShuffleDatasetV3"
                ) if split else None)
        if repeat is None:
            return cls(tuple(reversed(above)), own[split], ds, grouped=grouped)
        length = int(own[split].input(False).cardinality())  # a repetition's, this group's
        if length < 0:
            return None
        repeated = (len(above) - repeat[0], repeat[1], length)
        return cls(tuple(reversed(above)), own[split], ds, repeated)

    def carried(self, position: Any) -> dict[str, Any] | None:
        """The start of a pass from a global row under another plan, given the position of a
        state taken under the old one: the same pass and seeds (the row is one of that pass's
        order), no batches yet; None where the position is not a replayed one."""
        try:
            number, _, seeds = position_of(position)
        except ValueError:
            return None
        if number is None or seeds is None:
            return None
        return {"pass": number, "batches": 0, "seeds": [*seeds]}

    def positioned(self, number: int | None, seeds: tuple[int, int] | None, skip: int
                   ) -> tuple[int, Any]:
        """:meth:`Passes.start` for the pass starting at the shuffle's iterator ``number``,
        from element ``skip`` of it (past the repetitions of a ``repeat`` over the shuffle)."""
        if self.repeat is None:
            return self.passes.start(number, seeds, peel=self.peels)
        _, count, length = self.repeat
        done = min(skip // length, count) if count >= 0 else skip // length
        return self.passes.start(number, seeds, ahead=done, per_pass=max(count, 1))

    def dataset(self, shuffled: Any, skip: int,
                split: Callable[[Any], Any] | None = None) -> Any:
        """The pipeline over ``shuffled`` (from :meth:`Passes.start`), from element ``skip``;
        ``split``: a loading group's share of the elements (``shard(K, k)``), taken right
        after the shuffle, so that the ops over it run for that share only (they give one
        element per element, in order: the same elements as a split over the whole)."""
        under = self.repeat[0] if self.repeat is not None else 0
        below = self.passes.below if self.peels else ()  # over the shuffle of their input
        if self.repeat is None:
            ds = shuffled.skip(skip * self.grouped) if skip else shuffled
        else:  # this repetition from its element, then the others (each another iterator)
            _, count, length = self.repeat
            done, skip = divmod(skip, length)
            ds = self._applied(shuffled.skip(skip), self.above[:under])
            left = count - done - 1 if count >= 0 else -1
            if left:
                ds = ds.concatenate(self._applied(shuffled, self.above[:under]).repeat(left))
            if count >= 0 and done >= count:
                ds = ds.take(0)
        ds = split(ds) if split is not None else ds
        ds = self._applied(ds, below + self.above[under:])
        return with_options_of(self.user, ds) if self.user is not None else ds

    @property
    def peels(self) -> bool:
        """Whether a pass shuffles the input under the shuffle's stateless maps and maps over
        the shuffle (:mod:`~jaxload._src.pipelines.tf.shuffle`): the same elements in the same
        order, each decoded only where it is handed out (a group's share, after a resume's
        position)."""
        return bool(self.passes.below) and self.repeat is None

    @staticmethod
    def _applied(ds: Any, ops: tuple[Callable[[Any], Any], ...]) -> Any:  # in their order
        for again in ops:
            ds = again(ds)
        return ds


def keeps_its_order(graph: DatasetGraph, shuffles: int = 1) -> bool:
    """Whether a pipeline with ``shuffles`` shuffles (0, 1, or 2 where one shuffles file names
    under the other: :func:`~jaxload._src.pipelines.tf.shuffle.names_shuffle`) gives the same
    elements in the same order on every pass, given the shuffles' seeds: no other shuffle or
    ``Dataset.random``, no parallel op that hands out elements as they are ready, and random
    ops only where they change values, not which elements come (in a ``map``'s function, not a
    ``filter``'s or an ``interleave``'s)."""
    reordering = [op for op, _, _ in graph.nodes
                  if "Dataset" in op and any(word in op for word in _REORDERING)]
    if len(reordering) != shuffles or any(unordered(graph, node) or attr(node, "sloppy") is True
                                   for _, node, _ in graph.nodes):
        return False
    if graph.graph is None:
        return True
    return not any(
        node.op not in _VALUES_ONLY and any(inner.op in RANDOM_VALUES for function in
                                            functions_of(graph.graph, [node])
                                            for inner in function.node_def)
        for node in graph.graph.node)


def after_pass(replay: Replay, position: Any) -> dict[str, Any] | None:
    """The position where the pass after the one ending at ``position`` starts: the shuffle's
    next iterator (a ``repeat`` over the shuffle makes one per repetition), no batch handed out
    yet; None where ``position`` names no pass (nothing was handed out: the next pass).

    Example:
      >>> after_pass(Replay.__new__(Replay), None) is None
      True
    """
    number, _, seeds = position_of(position)
    if number is None or seeds is None:
        return None
    per_pass = 1 if replay.repeat is None else max(replay.repeat[1], 1)
    return {"pass": number + per_pass, "batches": 0, "seeds": list(seeds)}


def position_of(position: Any) -> tuple[int | None, int, tuple[int, int] | None]:
    """``(pass, elements handed out, seeds)`` of a replayed pipeline's position (None: the
    start of the next pass); a ValueError naming the field where it is not one.

    Example:
      >>> position_of({"pass": 2, "batches": 5, "seeds": [87654321, 1]})
      (2, 5, (87654321, 1))
      >>> position_of({"pass": -1, "batches": 5, "seeds": [1, 1]})
      Traceback (most recent call last):
      ...
      ValueError: the state's position['pass'] must be an int >= 0, got -1
    """
    if position is None:
        return None, 0, None
    if not isinstance(position, dict) or "saved" in position or set(position) != {
            "pass", "batches", "seeds"}:
        raise ValueError(
            "the state's position is not one of a shuffled tf.data pipeline positioned by "
            "replay ({'pass', 'batches', 'seeds'}), which this loader's pipeline is: got "
            f"{position!r:.120} (a state of another pipeline, or of jaxload 0.2 and earlier, "
            "which saved this pipeline's iterator with its buffer: restart the pass)")
    for key in ("pass", "batches"):
        if not is_nonnegative_int(position[key]):
            raise ValueError(f"the state's position[{key!r}] must be an int >= 0, got "
                             f"{position[key]!r}")
    seeds = position["seeds"]
    if not (isinstance(seeds, list) and len(seeds) == 2 and all(
            is_nonnegative_int(seed) for seed in seeds)):
        raise ValueError(f"the state's position['seeds'] must be a list of two ints >= 0, got "
                         f"{seeds!r}")
    return position["pass"], position["batches"], (seeds[0], seeds[1])
