"""The passes of one user's ``shuffle``, rebuilt with the same seeds: :class:`Passes`.

A seeded shuffle's order depends only on its seeds, its buffer size and how many elements its
input gives, not on what they are. So ``input.map(decode).shuffle(B, seed)`` hands out, pass by
pass, the elements of ``input.shuffle(B, seed).map(decode)``: the same decoded elements in the
same order, where ``decode`` holds no stateful op (:func:`peeled`). A pass therefore shuffles
the input under such maps and maps over the shuffle: the buffer holds records, not decoded
elements; a resume at element ``p`` reads the ``p`` records before it without decoding them (a
resume at 90% of an epoch of JPEGs skips 90% of an epoch's decodes); a split by elements
decodes its own share only; and the first element comes once the buffer holds ``B`` records,
not ``B`` decoded elements.

Example:
  >>> import tensorflow as tf
  >>> ds = tf.data.Dataset.range(6).map(lambda x: 10 * x).shuffle(6, seed=1)
  >>> base, below = peeled(compat.tf_shuffle(ds)[0])
  >>> (base.element_spec, len(below))           # the range under the map, and the map
  (TensorSpec(shape=(), dtype=tf.int64, name=None), 1)
"""

from __future__ import annotations

import random
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxload._src import compat
from jaxload._src.pipelines.tf.split import files_of_group, under

UNSEEDED = (0, 0)  # TensorFlow's op seeds of a shuffle without a seed
# per user shuffle, per split of its input ((K, k) by files, None whole): its passes
PASSES: weakref.WeakKeyDictionary[Any, dict[tuple[int, int] | None, Passes]] = (
    weakref.WeakKeyDictionary())
PASSES_LOCK = threading.Lock()


def peeled(ds: Any) -> tuple[Any, tuple[Callable[[Any], Any], ...]]:
    """``ds`` under its trailing one-to-one ops whose functions hold no stateful op (a
    ``map`` that decodes, parses, resizes; a ``prefetch``), and those ops, each as a function
    applying it to another input, in the order they apply. A map with a stateful op (a random
    op that is not stateless, a ``py_function``) stays: moved, it would draw other values."""
    below = []
    while (step := compat.tf_one_to_one(ds)) is not None and compat.tf_stateless(ds):
        ds, again = step
        below.append(again)
    return ds, tuple(reversed(below))


class Passes:
    """The passes started over one user's shuffle: its rebuilt twin, and how many iterators
    were made of it (each draws the seeds of another pass where the shuffle reshuffles).
    ``split``: ``(K, k)`` where the shuffle's input is split by files (each group's twin
    shuffles the records of its own files); ``graph``: the input's ``GraphDef``, where known
    (the split then reads no graph)."""

    def __init__(self, args: tuple[Any, ...], split: tuple[int, int] | None = None,
                 graph: Any = None):
        self._whole, self._size, seed, seed2, self.reshuffles = args
        self.seeds = (seed, seed2)
        self.shuffles = self._size is not None  # else the passes are of an unshuffled source
        self.drawn = self.shuffles and self.seeds == UNSEEDED  # this process's own draw
        if self.drawn:
            draw = random.SystemRandom()
            self.seeds = (draw.randrange(1, 2**31), draw.randrange(1, 2**31))
        self._base, self.below = peeled(self._whole) if self.shuffles else (self._whole, ())
        self._split, self._graph = split, graph
        # peeled? -> the shuffle of file names under the input, if any (rebuilt for each twin)
        self._names = {peel: names_shuffle(ds) for peel, ds in ((False, self._whole),
                                                                 (True, self._base))}
        if self._names[False] is not None and self._names[True] is None:  # the maps peeled
            # are all there is over the inner shuffle: peeled, it would be the user's own
            # shuffle, drawing its orders from its own count, not rebuilt for each pass
            self._base, self.below, self._names[True] = self._whole, (), self._names[False]
        self._built_inputs: dict[bool, Any] = {}  # peeled? -> the input the twin shuffles
        self._lock = threading.Lock()
        self._twins: dict[bool, tuple[Any, int]] = {}  # peeled? -> twin, iterators made of it
        self._orders: tuple[Any, int] | None = None  # (in_memory.py) orders, the next's pass
        self._started = 0

    def check(self, seeds: tuple[int, int] | None) -> None:
        """A ValueError where a position's ``seeds`` cannot be this shuffle's."""
        if seeds is not None and seeds != self.seeds and not self.drawn:
            raise ValueError(
                f"the state's position has the shuffle seeds {list(seeds)}, this pipeline's "
                f"shuffle has {list(self.seeds)}: a state continues only the pipeline it was "
                "taken with")

    def start(self, number: int | None, seeds: tuple[int, int] | None, ahead: int = 0,
              per_pass: int = 1, peel: bool = False) -> tuple[int, Any]:
        """The rebuilt shuffle positioned for the pass that starts at its iterator ``number``
        (None: the next one) with ``seeds`` (None: its own), ``ahead`` of its iterators
        already made (the repetitions of a ``repeat`` over it done), counted as started: the
        caller makes one iterator of a pipeline over it, which makes ``per_pass`` of the
        shuffle's (1, or a repeat's count). ``peel``: the twin shuffles the input under
        :attr:`below` (the caller applies them over it). Raises a ValueError where ``seeds``
        are not the shuffle's own."""
        with self._lock:
            number = self._numbered(number, seeds, per_pass)
            if not self.shuffles:
                return number, self.input(False)
            twin, made = self._twins.get(peel, (None, -1))
            if twin is None or ahead or per_pass != 1 or number != made:  # a pass may end early
                names_twin: Any = None  # a fresh twin of the names' shuffle, positioned too
                if (names := self._names[peel]) is not None:
                    self._built_inputs[peel], names_twin = self._over_names(*names)
                twin = compat.tf_shuffled(self.input(peel), self._size, self.seeds,
                                          self.reshuffles)
                for shuffled, draws in ((twin, self.reshuffles), (names_twin, True)):
                    for _ in range(number + ahead if shuffled is not None and draws else 0):
                        iter(shuffled)  # draws a pass's seeds; reads nothing
            self._twins[peel] = twin, number + per_pass
            return number, twin

    def order(self, number: int | None, seeds: tuple[int, int] | None, rows: int
              ) -> tuple[int, np.ndarray | None]:
        """As :meth:`start`, for a shuffle of ``from_tensor_slices`` read by index
        (:mod:`~jaxload._src.pipelines.tf.in_memory`): the order of its ``rows`` rows in the
        pass, the shuffle's over ``range(rows)`` with the same seeds (None: unshuffled). Passes
        in sequence read one iterator of the repetitions of that shuffle, which computes each
        pass's order while the one before runs (:meth:`order_ahead` starts it at the build):
        no tf.data iterator is built per pass."""
        with self._lock:
            number = self._numbered(number, seeds, 1)
            if not self.shuffles or not rows:
                return number, None if not self.shuffles else np.zeros(0, np.int64)
            if self._orders is None or self._orders[1] != number:
                self._orders = self._orders_from(number, rows), number
            order = np.asarray(next(self._orders[0]))
            self._orders = self._orders[0], number + 1
            return number, order

    def order_ahead(self, rows: int) -> None:
        """Starts computing the next pass's order (:meth:`order`) in tf.data's background."""
        with self._lock:
            if self.shuffles and rows and self._orders is None:
                self._orders = self._orders_from(self._started, rows), self._started

    def _orders_from(self, number: int, rows: int) -> Any:
        """An iterator of the orders of the passes from ``number`` on, each computed ahead."""
        import tensorflow as tf

        twin = compat.tf_shuffled(tf.data.Dataset.range(rows), self._size, self.seeds,
                                  self.reshuffles)
        for _ in range(number if self.reshuffles else 0):
            iter(twin)  # draws a pass's seeds; reads nothing
        options = tf.data.Options()  # (rewrites and autotuning: 4 of a new iterator's 7 ms)
        options.experimental_optimization.apply_default_optimizations = False
        options.autotune.enabled = False
        return iter(twin.batch(rows).repeat().prefetch(1).with_options(options))

    def _numbered(self, number: int | None, seeds: tuple[int, int] | None, per_pass: int) -> int:
        """The pass starting at iterator ``number`` (None: the next one) with ``seeds`` (None:
        its own), counted as started; a ValueError where ``seeds`` are not the shuffle's."""
        self.check(seeds)
        if seeds is not None and seeds != self.seeds:  # drawn by the process that saved
            self.seeds = seeds
            self._twins.clear()
            self._orders = None
        if number is None:
            number = self._started
        self._started = number + per_pass
        return number

    def input(self, peel: bool) -> Any:
        """The input the twin shuffles: the shuffle's (this group's files' share where split
        by files), or with ``peel`` the one under :attr:`below`. Split once, when first asked."""
        if peel not in self._built_inputs:
            ds = self._base if peel else self._whole
            if (names := self._names[peel]) is not None:
                ds = self._over_names(*names)[0]
            elif self._split:
                graph = self._graph if not peel or self._graph is None else under(
                    self._graph, len(self.below))
                ds = files_of_group(ds, *self._split, graph=graph)
            self._built_inputs[peel] = ds
        return self._built_inputs[peel]

    def _over_names(self, above: tuple[Callable[[Any], Any], ...], shuffle: tuple[Any, ...]
                    ) -> tuple[Any, Any]:
        """The input rebuilt over a twin of its shuffle of file names (this group's names
        where split by files: the names TensorFlow's FILE rewrite gives it, the shard taken
        where that rewrite takes it, on the names in memory), and that twin.
        An unseeded names' shuffle gets seeds derived from the shuffle's own: any order is
        its meaning, and every process and every resume then draws the same."""
        names, size, seed, seed2, reshuffles = shuffle
        if self._split:
            names = names.shard(*self._split)
        seeds = (seed, seed2) if (seed, seed2) != UNSEEDED else (
            self.seeds[0] * 1_000_003 % (2**31 - 1) or 1, self.seeds[1] * 7_919 % (2**31 - 1) or 1)
        twin = ds = compat.tf_shuffled(names, size, seeds, reshuffles)
        for again in above:
            ds = again(ds)
        return ds, twin


def names_shuffle(ds: Any) -> tuple[tuple[Callable[[Any], Any], ...], tuple[Any, ...]] | None:
    """``ds`` as ops over a shuffle of file names in memory (``list_files``, or
    ``from_tensor_slices(names).shuffle(...)``) through ``map``\\ s, ``prefetch``\\ es and
    ``interleave``\\ s: those ops, each as a function applying it to another input, in the order
    they apply, and the shuffle's ``(names, buffer_size, seed, seed2, reshuffle)``; None where
    ``ds`` is not of that shape. Its order on each pass is then a function of the shuffles'
    seeds and the pass's number, as the shuffle over ``ds`` needs for a replay."""
    above: list[Callable[[Any], Any]] = []
    while (shuffle := compat.tf_shuffle(ds)) is None:
        step = compat.tf_one_to_one(ds) or compat.tf_interleave(ds)
        if step is None:
            return None
        ds, again = step
        above.append(again)
    if not above or not compat.tf_is_tensor_slices(shuffle[0]):
        return None
    return tuple(reversed(above)), shuffle
