"""The passes after a resume of a tf.data pipeline whose checkpoint holds its shuffle's buffer,
in the order of the uninterrupted run's passes.

A shuffle that reshuffles each pass draws each iterator's seeds from a seed generator that the
dataset holds and every iterator of it shares: pass ``n`` is the ``n``-th iterator made. A
checkpoint of an iterator records the generator's count while its shuffle is still reading,
and a restore sets it; but once the shuffle's part of the pass is read (the last elements wait
in the buffers above it) the checkpoint holds no shuffle, and a restore leaves the generator
where making and restoring the iterator put it: the pass after a resume from the end of pass 5
then had the order of pass 2, not 6. A count position (re-read on resume) started the pass at
the generator's first order whatever its pass.

So each position of such a pipeline records its pass (``"pass": n``), and a pass after a resume
runs over a copy of the pipeline whose shuffles have seed generators of their own (the graph's
handles renamed: TensorFlow makes a generator for a name it has not seen, from the shuffle's
seeds), drawn forward to the pass wanted by shuffles of two elements over the same generators,
which read nothing (a shuffle under a ``cache`` keeps its first pass's order, as the cache
does). Only shuffles with seeds, at the pipeline's top level, under no ``repeat``: for the rest
a resume keeps TensorFlow's order (see docs/guides/resuming.md).

Example:
  >>> import tensorflow as tf
  >>> ds = tf.data.Dataset.range(8).shuffle(8, seed=1).filter(lambda x: x % 2 == 0)
  >>> orders = [[int(x) for x in ds] for _ in range(3)]
  >>> copy = fresh_generators(ds)
  >>> [int(x) for x in copy.at(2)] == orders[2]          # pass 2, drawn forward
  True
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator
from typing import Any

from jaxload._src import compat
from jaxload._src.validate import is_nonnegative_int

_SHUFFLE = "ShuffleDatasetV3"
_RESOURCE = 20  # DT_RESOURCE
# per user pipeline: [the next pass's number, whether a resume restored its generators]
STARTED: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


class FreshGenerators:
    """A pipeline rebuilt over seed generators of its own: :meth:`at` gives it positioned at a
    pass. ``graph``: the pipeline's; ``handles``: its shuffles' generator handles (the graph's
    ``Const`` nodes), each with that shuffle's seeds and its draws a pass (1; 0 under a cache)."""

    def __init__(self, pipeline: Any, graph: Any,
                 handles: list[tuple[Any, tuple[int, int], int]]):
        self._pipeline, self._graph, self._handles = pipeline, graph, handles
        self._copy: Any = None
        self._drawers: list[Any] = []
        self._next = -1  # the pass the copy's next iterator has

    def at(self, number: int, restores: bool = False) -> Any:
        """The pipeline whose next iterator has pass ``number``'s order. ``restores``: that
        iterator will be restored from a checkpoint, which may move its generators: the pass
        after it starts from a new copy."""
        if self._copy is None or self._next != number:
            self._rebuild()
            for drawer, (_, _, draws) in zip(self._drawers, self._handles, strict=True):
                for _ in range(number * draws):
                    iter(drawer)  # draws a pass's seeds; reads nothing
        self._next = -1 if restores else number + 1
        return self._copy

    def _rebuild(self) -> None:
        """A copy of the pipeline whose shuffles name new generators (one per shuffle, with its
        seeds), and for each a dataset whose iterators draw from it."""
        made = [compat.tf_seed_generator(seeds) for _, seeds, _ in self._handles]
        graph = type(self._graph)()
        graph.CopyFrom(self._graph)
        consts = {node.name: node for node in graph.node}
        for (const, _, _), drawer in zip(self._handles, made, strict=True):
            consts[const.name].attr["value"].CopyFrom(_handle_value(drawer))
        self._copy = compat.tf_from_graph(graph, self._pipeline.element_spec)
        self._copy._jaxload_generators = made  # they live as long as the copy
        self._drawers = made


def fresh_generators(pipeline: Any) -> FreshGenerators | None:
    """``pipeline`` over seed generators of its own (see the module docstring), or None where
    it has no shuffle that reshuffles or one this cannot position: an unseeded one, one in a
    function (an ``interleave``'s), one under a ``repeat``, another op with a generator. A
    shuffle under a ``cache`` has its first pass's order in every pass, as the cache keeps it."""
    graph = compat.tf_graph(pipeline)
    nodes = {node.name: node for node in graph.node}
    generators = _generators(graph)
    if not generators or any("Dataset" in node.op and ("Shuffle" in node.op or "Random" in node.op)
                             for function in graph.library.function for node in function.node_def):
        return None
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name.split(":")[0].lstrip("^"), []).append(node)
    handles = []
    for node in graph.node:
        inputs = [name.split(":")[0].lstrip("^") for name in node.input]
        if not any(name in generators for name in inputs):
            continue
        if node.op != _SHUFFLE or len(inputs) < 5:
            return None
        if not node.attr["reshuffle_each_iteration"].b:  # the same order every pass
            continue
        seeds = _seeds(inputs, nodes)
        above = {op.op for op in _downstream(node, consumers)}
        if seeds is None or "RepeatDataset" in above:  # unseeded: its own draw each run;
            return None  # under a repeat: a draw per repetition
        cached = any(op.startswith("CacheDataset") for op in above)
        handles.append((nodes[inputs[4]], seeds, 0 if cached else 1))
    return FreshGenerators(pipeline, graph, handles) if handles else None


def pin_orders(graph: Any) -> list[Any]:
    """Gives each seeded shuffle of ``graph`` (a ``GraphDef``, changed in place) a generator of
    its own that gives every iterator the same seeds: a dataset rebuilt from it reads one order
    however many iterators of it are made, and draws none of the passes of the pipeline whose
    generators the graph named (reading a pipeline's file names to count them drew two of
    them, so its first pass had the order of its third). Returns the generators, to be kept as
    long as that dataset."""
    nodes = {node.name: node for node in graph.node}
    generators, kept = _generators(graph), []
    for node in graph.node:
        inputs = [name.split(":")[0].lstrip("^") for name in node.input]
        if node.op != _SHUFFLE or len(inputs) < 5 or inputs[4] not in generators:
            continue
        seeds = _seeds(inputs, nodes)
        if seeds is None:  # unseeded: its own draw in each process
            continue
        drawer, value = _fixed(seeds)
        nodes[inputs[4]].attr["value"].CopyFrom(value)
        kept.append(drawer)
    return kept


_FIXED: dict[tuple[int, int], tuple[Any, Any]] = {}  # seeds -> a fixed generator, its handle


def _fixed(seeds: tuple[int, int]) -> tuple[Any, Any]:
    """A generator that gives every iterator ``seeds``' order, and its handle's ``Const``
    value: made once per seeds (it holds no state that reads change, so reads may share it)."""
    if seeds not in _FIXED:
        drawer = compat.tf_seed_generator(seeds, reshuffle=False)
        _FIXED[seeds] = drawer, _handle_value(drawer)
    return _FIXED[seeds]


def reshuffles(graph: Any) -> bool:
    """Whether a shuffle at the top level of ``graph`` (a ``GraphDef``) reshuffles each pass."""
    return any(node.op == _SHUFFLE and node.attr["reshuffle_each_iteration"].b for node in graph.node)


def _generators(graph: Any) -> set[str]:
    """The names of the ``Const`` nodes of ``graph`` that hold a seed generator's handle."""
    return {n.name for n in graph.node if n.op == "Const" and n.attr["dtype"].type == _RESOURCE
            and "SeedGenerator" in n.attr["value"].tensor.resource_handle_val[0].name}


def _downstream(node: Any, consumers: dict[str, list[Any]]) -> list[Any]:
    """The nodes that take ``node``'s output, directly or through others."""
    found: dict[str, Any] = {}
    stack = list(consumers.get(node.name, []))
    while stack:
        current = stack.pop()
        if current.name not in found:
            found[current.name] = current
            stack.extend(consumers.get(current.name, []))
    return list(found.values())


def _seeds(inputs: list[str], nodes: dict[str, Any]) -> tuple[int, int] | None:
    """The seeds of a shuffle with ``inputs`` (its input nodes' names), or None: unseeded."""
    seeds = tuple(_scalar(nodes[name]) for name in inputs[2:4])
    return None if None in seeds or seeds == (0, 0) else seeds  # type: ignore[return-value]


def _handle_value(drawer: Any) -> Any:
    """The ``value`` of the ``Const`` node that holds ``drawer``'s seed generator handle."""
    return next(node for node in compat.tf_graph(drawer).node
                if node.op == "Const" and node.attr["dtype"].type == _RESOURCE).attr["value"]


def _scalar(const: Any) -> int | None:
    values = const.attr["value"].tensor.int64_val
    return int(values[0]) if len(values) == 1 else None


class PassNumbers:
    """Which pass of a user's pipeline each pass of a loader is, counted per user pipeline (as
    TensorFlow counts a shuffle's iterators: loaders built per epoch over one pipeline go on
    from each other), and the pipeline to run it over: the loader's own, or after a resume
    restored its generators, a copy over fresh ones (:class:`FreshGenerators`)."""

    def __init__(self, user: Any):
        self._user = user
        self._fresh: weakref.WeakKeyDictionary[Any, FreshGenerators | None] = (
            weakref.WeakKeyDictionary())

    def start(self, pipeline: Any, position: Any) -> tuple[int, Any]:
        """``(number, pipeline)`` for a pass from ``position`` (None: the next pass; a
        position with ``"pass"``: that pass, resumed) over ``pipeline``."""
        number = position.get("pass") if isinstance(position, dict) else None
        started = STARTED.setdefault(self._user, [0, False])
        if number is None:
            number = started[0]
        else:  # a resume sets the generators where its checkpoint (or none) leaves them
            started[1] = True
        started[0] = number + 1
        if not started[1]:
            return number, pipeline
        if pipeline not in self._fresh:
            self._fresh[pipeline] = fresh_generators(pipeline)
        fresh = self._fresh[pipeline]
        if fresh is None:
            return number, pipeline
        restores = isinstance(position, dict) and position.get("saved") is not None
        return number, fresh.at(number, restores=restores)

    def counts(self, pipeline: Any, position: Any, first: int) -> tuple[Any, Iterator[Any]]:
        """``(pipeline, positions)`` of a pass re-read from its start (an iterator tf.data
        cannot save): the positions count batches from ``first`` on, each naming the pass
        (``{"batches": n, "pass": k}``), and the pipeline has pass ``k``'s order."""
        number, run = self.start(pipeline, position)
        return run, ({"batches": n, "pass": number} for n in itertools.count(first))


def carried(position: Any) -> dict[str, Any] | None:
    """The start of a pass from a global row under another plan, given the position of a
    state taken under the old one: the same pass (the row is one of its order), no batch
    handed out; None where the position names no pass.

    Example:
      >>> carried({"batches": 5, "saved": {"batches": 5, "state": "..."}, "pass": 2})
      {'batches': 0, 'saved': None, 'pass': 2}
    """
    if not isinstance(position, dict) or not is_nonnegative_int(position.get("pass")):
        return None
    return {"batches": 0, "saved": None, "pass": position["pass"]}


def after_pass(position: Any) -> dict[str, Any] | None:
    """The position where the pass after the one ending at ``position`` starts (its number
    the next, no batch handed out), where ``position`` names its pass; else None.

    Example:
      >>> after_pass({"batches": 7, "saved": None, "live": 3, "pass": 2})
      {'batches': 0, 'saved': None, 'pass': 3}
    """
    if not isinstance(position, dict) or not isinstance(position.get("pass"), int):
        return None
    return {"batches": 0, "saved": None, "pass": position["pass"] + 1}
