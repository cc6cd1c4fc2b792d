"""A ``tf.data.Dataset``: split over the loading groups by files or by elements
(:mod:`~jaxload._src.pipelines.tf.split`), batched with ``batch``, positioned by tf.data's own
iterator checkpoints (:mod:`~jaxload._src.pipelines.tf.iterator`)."""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from jaxload._src import compat
from jaxload._src.pipelines.base import Batches, LocalSpec, weakly
from jaxload._src.pipelines.tf import reseed
from jaxload._src.pipelines.tf.decide import ELEMENTS, FILES
from jaxload._src.pipelines.tf.graph import PARALLEL_INTERLEAVES, DatasetGraph
from jaxload._src.pipelines.tf.in_memory import InMemory, Steps
from jaxload._src.pipelines.tf.iterator import (
    batches_of,
    checked_batches,
    checkpointed,
    counted,
    positioning,
    saveable,
)
from jaxload._src.pipelines.tf.on_demand import Live
from jaxload._src.pipelines.tf.order import check_same_order, unseen_order
from jaxload._src.pipelines.tf.probe import Probe as _Probe
from jaxload._src.pipelines.tf.read import read_graph, with_options_of
from jaxload._src.pipelines.tf.replay import Replay, after_pass, position_of
from jaxload._src.pipelines.tf.rewrite import sequential_graph
from jaxload._src.pipelines.tf.spec import batch_spec, check_element_spec
from jaxload._src.pipelines.tf.split import (
    BY_FILES,
    BY_FUNCTION,
    FUNCTION,
    NONE,
    Sharding,
    real_rows,
    split,
    with_own_caches,
)
from jaxload._src.pipelines.tf.stream import Split, continued, fingerprinted, stream_of
from jaxload._src.plan import Plan
from jaxload._src.protocol import INFINITE
from jaxload._src.remainder import DROP, rows_read
from jaxload._src.state import Elastic, why_not_sliceable
from jaxload._src.trees import HostBatch


class TfDataset:
    """This loading group's share of a ``tf.data.Dataset``, batched to ``local_batch_size``.

    By files (``shard="files"``, or ``"auto"`` where it reads files) each group's pipeline reads
    only its own files; by elements it is (the rows of) ``ds.skip(rows).shard(K, k)`` from global row
    ``rows``, which can start at any global row (another topology), or with ``prove`` (and no
    replay) its split that proves what it reads (:mod:`~jaxload._src.pipelines.tf.stream`),
    or arrays in memory, read by index (``in_memory``). Its length is tf.data's cardinality
    where known; its batches are not read by index (``by_index``); its spec is the element's."""

    by_index: bool = False
    not_resumable: str | None = None
    in_memory: InMemory | None = None

    def __init__(self, ds: Any, plan: Plan, *, global_batch_size: int, shard: bool | str,
                 batched: bool, remainder: str, prove: bool = True):
        graph, user = read_graph(ds), ds  # the one serialization of the pipeline
        check_element_spec(ds, plan.local_batch_size if batched else None, remainder, graph.graph,
                           (plan.local_batch_size, global_batch_size))
        self._symbolic, whole = graph.symbolic(), graph.graph  # what rewrites start from
        if self._symbolic and graph.ops() & PARALLEL_INTERLEAVES and (
                changed := sequential_graph(whole)) is not None:
            whole, ds = changed, compat.tf_from_graph(changed, ds.element_spec)
        self._ds, self._plan, self._global = ds, plan, global_batch_size
        self._batched, self._remainder = batched, remainder
        self._share, self.sharding = (ds, Sharding(NONE)) if shard in (False, FUNCTION) else (
            split(ds, plan, "auto" if shard is True else str(shard), graph, whole, global_batch_size))
        check_same_order(graph, self.sharding, plan)
        if self.sharding.mode == ELEMENTS and graph.caches_to_files():
            self._ds = ds = with_own_caches(ds, whole, plan, ELEMENTS)
        self._replay = self._replayed_share(ds, graph)
        self._stream = Split.of(self._ds, plan, remainder == DROP, batched) if (
            prove and self.sharding.mode == ELEMENTS and plan.shard_count > 1 and self._replay is None
            and plan.global_batch_size == global_batch_size) else None
        self._same = _Probe(self._ds, plan, self.sharding, batched,  # the stream proves more
                            [] if self._stream else unseen_order(graph), sources=user,
                            graph=graph)
        self.backend = "tf.data" if self.sharding.mode in (ELEMENTS, NONE) else (
            f"tf.data/{self.sharding.mode}")
        self._save = saveable(graph)
        self._live = None if self._symbolic or self._replay else Live()  # buffers: on demand
        self._numbers = reseed.PassNumbers(user) if self._live is not None and (
            self._save is not None or reseed.reshuffles(graph.graph)) else None
        if self._live is not None:  # (Pipeline's optional settled, handed and after_pass)
            self.settled, self.handed = self._live.settled, self._live.handed
        if self._replay is not None or self._live is not None:  # a state taken after a pass
            self.after_pass: Callable[[Any], Any] = (  # resumes at the next one
                functools.partial(after_pass, self._replay) if self._replay else reseed.after_pass)
        self.positioning = positioning(self._replay.passes.shuffles if self._replay else None,
                                       self._save, self._symbolic)
        self.batches = self.from_row(0)
        length = int(ds.cardinality()) * (global_batch_size // plan.shard_count if batched else 1)
        why_not = BY_FILES if self.sharding.mode not in (ELEMENTS, NONE) else BY_FUNCTION if (
            shard == FUNCTION) else why_not_sliceable(shard is not False, batched, "the whole dataset")
        self.elastic = Elastic(from_row=None if why_not else weakly(self.from_row), why_not=why_not,
                               length=length if length >= 0 else None, rows_per_step=global_batch_size,
                               fingerprint=self._same.fingerprint,
                               carried=self._replay.carried if self._replay else (
                                   reseed.carried if self._live else None))

    def check_position(self, resume: dict[str, Any], batch_a_step: bool = True) -> None:
        """A ValueError naming what is wrong with the backend position a state resumes at
        (``step``, ``origin``, ``position``): another kind, malformed, or not at its step."""
        if self._replay is not None:
            _, consumed, seeds = position_of(resume["position"])
            self._replay.passes.check(seeds)
        else:
            consumed = checked_batches(resume["position"], proved=self._stream is not None)
        expected = resume["step"] - resume.get("origin_step", 0)
        pad = self._remainder != DROP  # where this process's data ended it pads: no batch read
        if batch_a_step and consumed > expected or not pad and (
                batch_a_step and consumed != expected or consumed < expected):
            raise ValueError(f"the state's position has {consumed} batches handed out, but its "
                             f"step is {resume['step']}: each step hands out "
                             f"{'one batch' if batch_a_step else 'at least one'}"
                             f"{' or padding' if pad else ''} ({expected})")

    def spec(self) -> LocalSpec:
        """A per-process batch from the element spec: nothing is read."""
        return batch_spec(self._ds.element_spec, self._plan.local_batch_size, self._batched)

    def from_row(self, start: int) -> Callable[[Any], Batches]:
        """This group's batches from global row ``start`` on (0 unless sharded by elements),
        from a backend position: a checkpointed one (restored), a count (skipped), a replayed
        one (:mod:`~jaxload._src.pipelines.tf.replay`), or None."""
        import tensorflow as tf

        if self._replay is not None:
            return self._replayed(start, self._replay)
        group, options = self._group(start), tf.data.Options()
        options.experimental_symbolic_checkpoint = self._symbolic
        built: dict[tuple[int, bool], tuple[Any, int | None]] = {}  # the last one built
        mine = weakref.ref(self)  # the closures kept in self.batches: no cycle through self

        def build(own: TfDataset, skip: int, count: bool) -> tuple[Any, int | None]:
            """The pass's pipeline and its length. A ``Dataset`` is immutable and each
            ``iter()`` starts a fresh iterator, so the passes from the same point (every pass
            from the start) share one: building it again cost every pass 2-5 ms."""
            if (skip, count) not in built:
                pipeline, length = own._proved(start, skip) if own._stream else (
                    own._batched_group(group, skip), None)
                pipeline = pipeline.prefetch(tf.data.AUTOTUNE).with_options(options)
                built.clear()  # a resume skipping batches builds its own, once
                built[skip, count] = pipeline, length if own._stream else _length(pipeline)
            return built[skip, count]

        def read(own: TfDataset, batches: Any) -> Any:
            return fingerprinted(batches) if own._stream else batches

        def batches(position: Any) -> Batches:
            own, consumed, digest = mine(), batches_of(position), stream_of(position)
            assert own is not None  # its loader starts the pass
            count = own._save is None or (isinstance(position, int) or bool(digest)) and consumed > 0
            again = int(count and consumed > 0 and bool(digest) and bool(own._stream))
            pipeline, length = build(own, consumed - again if count else 0, count)
            if count:  # with a digest, the last batch handed out is read again and compared
                first = consumed + 1 - again  # where it reshuffles, over the pass's order
                run, numbers = own._numbers.counts(pipeline, position, first) if (
                    own._numbers) else (pipeline, itertools.count(first))
                read_on = read(own, counted(run, numbers))
                return Batches(continued(read_on, digest, consumed) if again else read_on,
                               length=length - again if length not in (None, INFINITE) else length,
                               describe=own._same.described, proves=bool(own._stream),
                               uneven=own.sharding.mode != ELEMENTS)
            remaining = length - consumed if length not in (None, INFINITE) else length
            number, run = own._numbers.start(pipeline, position) if own._numbers else (
                None, pipeline)
            return Batches(read(own, checkpointed(run, position, live=own._live, number=number,
                                             ignore_external_state=bool(own._save))),
                           length=remaining, describe=own._same.described,
                           proves=bool(own._stream), uneven=own.sharding.mode != ELEMENTS)

        return batches

    def _replayed_share(self, ds: Any, graph: DatasetGraph) -> Replay | None:
        """The replay (replay.py) of the pipeline a pass splits or is, or None."""
        if self.sharding.mode == ELEMENTS:
            return Replay.of(self._ds, graph)
        if self._plan.global_batch_size != self._global:
            return None
        if self._share is ds:  # unsplit
            return Replay.of(ds, graph)
        if self.sharding.mode == FILES and not graph.caches_to_files():
            return Replay.of(ds, graph, split=(self._plan.shard_count, self._plan.shard_index))
        return None

    def _replayed(self, start: int, replay: Replay) -> Callable[[Any], Batches]:
        """As :meth:`from_row`, for a pipeline positioned by replay (``{"pass", "batches",
        "seeds"}``): over the shuffle's rebuilt twin, or by index; nothing saved as it goes."""
        import tensorflow as tf

        plan, elements = self._plan, self.sharding.mode == ELEMENTS
        if not elements:  # the group's own pipeline: a batch takes local_batch_size elements
            per_batch = 1 if self._batched else plan.local_batch_size
        elif plan.global_batch_size != self._global:  # each step: global_batch_size elements
            per_batch = self._global
        else:  # each step: one element (batched) or local_batch_size of each loading group
            per_batch = plan.shard_count * (1 if self._batched else plan.local_batch_size)
        whole: list[int | None] = []  # the pass's length in batches, once known
        mine = weakref.ref(self)  # the closures kept in self.batches: no cycle through self
        built: list[Any] = [None, None, None]  # the last pass's: twin, skip, pipeline
        below = (elements and plan.global_batch_size == self._global  # split under the maps,
                 and replay.grouped == 1)  # not under the user's batch
        if (memory := InMemory.of(self._ds) if plan.global_batch_size == self._global and not (
                self._batched) else None):  # read by index (in_memory.py): its order begun
            self.in_memory = memory
            replay.passes.order_ahead(memory.rows)
            steps = Steps(per_batch, *((plan.shard_count, plan.shard_index) if elements else (
                1, 0)), plan.local_batch_size, self._remainder == DROP)

        def pipeline(own: TfDataset, ds: Any, split: bool) -> Any:
            group = own._split(ds) if split else ds
            return own._batched_group(group, 0).prefetch(tf.data.AUTOTUNE)

        def read(own: TfDataset, number: int | None, consumed: int, seeds: Any
                 ) -> Iterator[tuple[HostBatch, Any]]:  # seeds: tuple[int, int] | None
            skip = start + consumed * per_batch  # (own: held while the pass reads, which a
            if memory is not None:  # set_state may start)
                number, order = replay.passes.order(number, seeds, memory.rows)
                read_on = memory.batches(order, skip, steps)
            else:
                number, shuffled = replay.positioned(number, seeds, skip)
                if built[0] is not shuffled or built[1] != skip:  # passes from one point
                    built[:] = [shuffled, skip, pipeline(own, replay.dataset(  # share one
                        shuffled, skip, split=own._split if below else None),  # pipeline:
                        elements and not below)]  # each iterator of it is another pass
            drawn = [*replay.passes.seeds]
            positions = ({"pass": number, "batches": n, "seeds": drawn}
                         for n in itertools.count(consumed + 1))
            yield from (zip(read_on, positions, strict=False) if memory is not None
                        else counted(built[2], positions))

        def batches(position: Any) -> Batches:
            own, (number, consumed, seeds) = mine(), position_of(position)
            assert own is not None  # its loader starts the pass
            if not whole:
                whole.append(_length(pipeline(own, own._ds.skip(start) if start else own._ds, True)
                                     if elements else pipeline(own, own._share, False)))
            length = whole[0]
            remaining = max(length - consumed, 0) if length not in (None, INFINITE) else length
            return Batches(read(own, number, consumed, seeds), length=remaining,
                           describe=own._same.described, uneven=not elements)

        return batches

    def _proved(self, start: int, skip: int) -> tuple[Any, int | None]:
        """Split by elements and proved (:mod:`~jaxload._src.pipelines.tf.stream`): this
        group's ``(batch, fingerprints)`` from global row ``start``, after ``skip`` batches
        (each took one global batch), with the user's options, and how many there are."""
        split = self._stream
        assert split is not None
        rows = start + skip * split.groups * split.rows
        below = split.below.skip(rows) if rows else split.below
        return with_options_of(self._ds, split.dataset(below)), split.length(
            int(below.cardinality()))

    def _group(self, start: int) -> Any:
        """By elements: ``ds.skip(start).shard(K, k)``, or with a padded global batch its real
        rows of each step, as batches. Otherwise (``start`` is 0) this group's share."""
        if self._share is not None and self.sharding.mode != ELEMENTS:
            return self._share
        return self._split(self._ds.skip(start) if start else self._ds)

    def _split(self, rest: Any) -> Any:
        """This group's elements of ``rest`` (the whole pipeline from a row on): ``rest.shard(K,
        k)``, or with a padded global batch its real rows of each step, as batches."""
        plan = self._plan
        if plan.global_batch_size != self._global:
            return real_rows(rest, self._global, plan)
        return rest.shard(plan.shard_count, plan.shard_index)

    def _batched_group(self, group: Any, skip: int) -> Any:
        """The group's pipeline batched to ``local_batch_size``, after ``skip`` batches."""
        plan, drop = self._plan, self._remainder == DROP
        padded = plan.global_batch_size != self._global
        if padded and self.sharding.mode not in (ELEMENTS, NONE):  # its own files' rows
            rows = rows_read(plan, self._global)
            group, padded = (group.batch(rows) if rows else group.take(0).batch(1)), True
        if self._batched or padded:
            return group.skip(skip) if skip else group
        group = group.skip(skip * plan.local_batch_size) if skip else group
        return group.batch(plan.local_batch_size, drop_remainder=drop)


def _length(ds: Any) -> int | None:
    """The batches a pipeline holds, where tf.data knows it (``INFINITE`` after repeat():
    tf.data's ``INFINITE_CARDINALITY`` is -1, ``UNKNOWN_CARDINALITY`` -2)."""
    n = int(ds.cardinality())
    return INFINITE if n == -1 else n if n >= 0 else None
