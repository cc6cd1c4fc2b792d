"""The contract between a source and the loader: :class:`Pipeline`.

A pipeline is one loading group's share of the user's data, sharded and batched to the plan's
``local_batch_size``: :meth:`Pipeline.batches` starts it at a backend position and yields this
process's numpy batches, each with the position after it. The loader never looks inside: what
a kind of source can do (say how long it is, read by index, start at a global row on another
topology) it states in these attributes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ParamSpec, Protocol, TypeVar, runtime_checkable

import jax

from jaxload._src.state import Elastic
from jaxload._src.trees import HostBatch, PyTree

LocalSpec = PyTree[jax.ShapeDtypeStruct]
"""A per-process batch's shapes and dtypes (leading dim: ``local_batch_size``)."""
P = ParamSpec("P")
R = TypeVar("R")


@runtime_checkable
class Pipeline(Protocol):
    """One loading group's batches of a source.

    Attributes:
      backend: the kind of source, recorded in states (a state resumes the same kind only).
      by_index: whether batches are read by index: a pass then knows its step count up front
        (:class:`Batches` ``length``) and reads each batch only when it is due.
      elastic: how the pipeline starts at a global row (a state from another topology), its
        length in elements where known, or why it cannot (:class:`jaxload._src.state.Elastic`).
      not_resumable: why ``set_state`` cannot work at all with this source, or None.

    A pipeline may also have ``check_position(resume, batch_a_step)``, called by ``set_state``
    on the point a state resumes at (``step``, ``origin``, backend ``position``; whether each
    step took one of its batches, not so under a batch-size schedule): a ValueError naming what
    is wrong with the position, before any batch is read. And ``settled(position)``, called by
    ``get_state`` on the backend position after the last batch handed out: the position as a
    state keeps it, where a pipeline completes its positions only when a state is asked for
    (a tf.data checkpoint that holds buffers: :mod:`~jaxload._src.pipelines.tf.on_demand`);
    then also ``handed(position)``, told the position after each batch handed out. And
    ``after_pass(position)``: the backend position where the pass after one ending at
    ``position`` starts, which a state taken after that pass records (a reshuffling pipeline's
    next order: :func:`jaxload._src.pipelines.tf.replay.after_pass`); without it, such a state
    starts the pipeline's next pass as a fresh loader's first.
    """

    backend: str
    by_index: bool
    elastic: Elastic
    not_resumable: str | None

    def batches(self, position: Any) -> Iterable[tuple[HostBatch, Any]]:
        """This group's batches from a backend position (None: the start), each with the
        backend position after it (JSON-serializable)."""
        ...

    def spec(self) -> LocalSpec | None:
        """A per-process batch's spec without reading data, where the source declares it
        (tf.data's ``element_spec``); None: the loader reads a first batch instead."""
        ...


class Batches:
    """A pass's per-process batches, ``(batch, backend position after it)``, and where known
    how many there are (``protocol.INFINITE``: no end); ``describe(seed)``, where given, says
    what the pipeline shards, as the processes compare it (:mod:`jaxload._src.same_dataset`;
    ``seed``: a number every process shares, another for each pass);
    ``proves``: each item is ``(batch, position, digest)``, the digest of the global batch the
    batch was kept from (:mod:`jaxload._src.stream_proof`); ``ended(unused)``, where given, is
    told that the pass ended as the processes agreed, with ``unused`` batches read and not
    handed out; ``uneven``: the batches are this loading group's own pipeline (its files, a
    per-host pipeline), whose length may differ from the others' by more than the last global
    batch, so that what ``remainder="drop"`` leaves out at a pass's end is named in a warning.

    Example:
      >>> import itertools
      >>> batches = [{"x": np.zeros((4, 2))}, {"x": np.ones((4, 2))}]   # per-process batches
      >>> source = Batches(zip(batches, itertools.count(1)), length=len(batches))
      >>> [position for batch, position in source], source.length
      ([1, 2], 2)
    """

    def __init__(self, batches: Iterable[tuple[HostBatch, Any]], length: int | None = None,
                 describe: Callable[[int], dict[str, Any] | None] | None = None,
                 proves: bool = False, ended: Callable[[int], None] | None = None,
                 uneven: bool = False):
        self._batches, self.uneven = batches, uneven
        self.length = length
        self.describe = describe
        self.proves = proves
        self.ended = ended

    def __iter__(self) -> Iterator[tuple[HostBatch, Any]]:
        return iter(self._batches)


def weakly(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` (bound) holding its object weakly: what a pipeline keeps of its own methods
    (its :class:`Elastic`'s ``from_row``) does not hold the pipeline in a reference cycle, which
    only Python's cyclic collector frees, and with it the tensors the pipeline holds (a
    ``from_tensor_slices`` dataset and the copies tf.data makes of it) when a loader is dropped.

    Example:
      >>> class Source:
      ...     def double(self, x):
      ...         return 2 * x
      >>> source = Source()
      >>> double = weakly(source.double)
      >>> double(4)
      8
      >>> del source
      >>> double(4)
      Traceback (most recent call last):
      ...
      ReferenceError: the pipeline of this method is gone (its loader was dropped)
    """
    ref = weakref.WeakMethod(method)

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        bound = ref()
        if bound is None:
            raise ReferenceError("the pipeline of this method is gone (its loader was dropped)")
        return bound(*args, **kwargs)

    return call
