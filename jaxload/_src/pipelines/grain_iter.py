"""A Grain ``IterDataset``: iterated, with Grain's own iterator state as the position."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from jaxload._src.adapters.stack import stack_elements
from jaxload._src.pipelines import grain_described
from jaxload._src.pipelines.base import LocalSpec
from jaxload._src.plan import Plan
from jaxload._src.remainder import DROP
from jaxload._src.state import Elastic
from jaxload._src.trees import HostBatch

NOT_ELASTIC = ("a grain.IterDataset cannot start at a given element without reading every "
               "element before it, and its split over loading groups is yours; pass its "
               "source MapDataset (with shard=True) so that jaxload can slice it")


class GrainIterDataset:
    """This loading group's ``IterDataset`` (sharded by the user: ``shard=False``), batched.

    It has no length and cannot read by index; it resumes on the same plan only (Grain's
    iterator state), since it cannot start at a global row. Loading groups whose random maps
    after the user's split have the same seeds are refused (they would draw the same random
    sequence; :mod:`~jaxload._src.pipelines.grain_described`).
    """

    backend: str = "grain"
    by_index: bool = False
    not_resumable: str | None = None

    def __init__(self, ds: Any, plan: Plan, *, shard: bool, batched: bool, remainder: str):
        if shard:
            raise ValueError(
                "from_grain got a grain.IterDataset with shard=True; an IterDataset cannot be "
                "sharded by index without reading every element. Shard its source MapDataset "
                f"(source[{plan.shard_index}::{plan.shard_count}] for this process, from "
                "layout.plan(global_batch_size)) before .to_iter_dataset(), and pass shard=False.")
        self.elastic = Elastic(why_not=NOT_ELASTIC)
        self.batches = grain_described.with_description(
            iterated(batched_iter(ds, plan.local_batch_size, batched, remainder)),
            grain_described.iter_dataset(ds, plan))

    def spec(self) -> LocalSpec | None:
        return None


def batched_iter(ds: Any, rows: int, batched: bool, remainder: str) -> Any:
    """``ds`` batched to ``rows`` rows (jaxload's aligned stacking), unless it is batched."""
    if batched:
        return ds
    return ds.batch(rows, drop_remainder=remainder == DROP, batch_fn=stack_elements)


def iterated(ds: Any) -> Callable[[Any], Iterator[tuple[HostBatch, Any]]]:
    """``batches(position)`` of an ``IterDataset``, with Grain's iterator state after each."""

    def batches(position: Any) -> Iterator[tuple[HostBatch, Any]]:
        iterator = iter(ds)
        if position is not None:
            iterator.set_state(position)
        for batch in iterator:
            yield batch, iterator.get_state()

    return batches
