"""A ``grain.DataLoader`` that shards and batches itself; jaxload checks that it does so for
this process's loading group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from jaxload._src import compat
from jaxload._src.pipelines.base import LocalSpec, weakly
from jaxload._src.pipelines.grain import described
from jaxload._src.plan import Plan
from jaxload._src.remainder import DROP
from jaxload._src.state import Elastic, LocalBatches
from jaxload._src.trees import HostBatch

_NOT_ELASTIC = {
    "order": "a grain.DataLoader's IndexSampler hands each of the shard_count shards a "
             "consecutive piece of the records, so its order depends on shard_count "
             "({was} in the state, {now} here) and a position under one has no counterpart "
             "under the other. Keep the number of loading groups, or pass a grain.MapDataset "
             "(shuffled with .shuffle(seed) if wanted) to from_grain, which jaxload can "
             "slice at any row",
    "workers": "the grain.DataLoader {which} worker_count > 0, whose workers interleave their "
               "batches, so the rows consumed are not a prefix of the sampler's order; use "
               "worker_count=0, or pass a grain.MapDataset to from_grain",
    "dropping": "the grain.DataLoader's {op} operation keeps another number of records than its "
                "sampler hands it, so a step is no block of the sampler's order and a position "
                "has no global row to continue from on another plan. Resume with the same plan, "
                "or pass a grain.MapDataset whose elements are the kept records",
    "unsharded": "with shard=False the grain.DataLoader's sharding is yours, and jaxload "
                 "cannot tell which records another one would give each new group; shard it "
                 "with jaxload.grain_shard_options",
}


class GrainDataLoader:
    """A ``grain.DataLoader`` (any ``worker_count``): its iterator state (JSON text) is the
    position. It knows its source's length and cannot read by index; it resumes on another
    topology where its sampler allows it (the same number of loading groups, no workers)."""

    backend: str = "grain.DataLoader"
    by_index: bool = False
    not_resumable: str | None = None

    def __init__(self, loader: Any, plan: Plan, *, shard: bool, remainder: str = DROP):
        if shard:
            check_data_loader(loader, plan, remainder)
        self._loader, self._plan, self._uneven = loader, plan, not shard  # (shard=False: own)
        self._describe = described.data_loader(loader, plan, shard=shard)
        self.batches = self.from_row(0)
        self.elastic = self._elastic(shard)

    def spec(self) -> LocalSpec | None:
        return None

    def from_row(self, rows: int) -> LocalBatches:
        """Batches from global row ``rows`` on (sampler index ``rows + shard_index``)."""
        loader, plan = self._loader, self._plan

        def batches(position: str | None) -> Iterator[tuple[HostBatch, Any]]:
            iterator = iter(loader)
            if position is not None:
                iterator.set_state(position.encode())
            elif rows:
                iterator.set_state(_at_sampler_index(iterator.get_state(), rows, plan))
            for batch in iterator:
                yield batch, iterator.get_state().decode()

        return described.with_description(batches, self._describe, uneven=self._uneven)

    def check_position(self, resume: dict[str, Any], batch_a_step: bool = True) -> None:
        """Grain's own ValueError where the state's iterator position does not fit this
        ``grain.DataLoader`` (another worker count, a sampler or source whose ``repr``
        differs), at ``set_state`` rather than at the first step after it."""
        position = resume["position"]
        if isinstance(position, str):
            compat.data_loader_check_state(self._loader, json.loads(position))

    def _elastic(self, shard: bool) -> Elastic:
        try:
            length: int | None = len(compat.data_loader_source(self._loader))
        except TypeError:
            length = None
        if not shard:
            return Elastic(why_not=_NOT_ELASTIC["unsharded"], length=length)
        if self._loader.multiprocessing_options.num_workers:
            return Elastic(why_not=_NOT_ELASTIC["workers"].format(which="has"), length=length)
        shard_count, dropping = self._plan.shard_count, _dropping(self._loader)

        def refuses(state: dict[str, Any]) -> str | None:
            was = state["plan"]["shard_count"]
            if was != shard_count:
                return _NOT_ELASTIC["order"].format(was=was, now=shard_count)
            if dropping:
                return _NOT_ELASTIC["dropping"].format(op=dropping)
            if state["position"] and json.loads(state["position"]).get("worker_count"):
                return _NOT_ELASTIC["workers"].format(which="of the state had")
            return None

        return Elastic(from_row=weakly(self.from_row), refuses=refuses, length=length)


def _dropping(loader: Any) -> str | None:
    """The first operation that keeps another number of records than it gets (a Filter or
    FlatMap), by its type's name, or None."""
    import grain

    for op in compat.data_loader_operations(loader):
        if isinstance(op, (grain.transforms.Filter, grain.experimental.FlatMapTransform)):
            return type(op).__name__
    return None


def _at_sampler_index(state: bytes, rows: int, plan: Plan) -> bytes:
    """A DataLoader iterator state (no workers) whose next sampler index is
    ``rows + shard_index``: group ``k`` of ``K`` reads indices ``k + K * j``."""
    moved = json.loads(state)
    moved["last_seen_indices"] = {"0": rows + plan.shard_index - plan.shard_count}
    return json.dumps(moved).encode()


def check_data_loader(loader: Any, plan: Plan, remainder: str = DROP) -> None:
    """A ``grain.DataLoader`` must shard by this process's loading group and batch
    ``plan.local_batch_size`` rows, and with ``remainder="pad"`` (every record delivered) drop
    none; a ValueError names both values otherwise."""
    import grain

    options = compat.data_loader_shard_options(loader)
    if (options.shard_index, options.shard_count) != (plan.shard_index, plan.shard_count):
        raise ValueError(
            f"the grain.DataLoader shards by shard_index={options.shard_index}, shard_count="
            f"{options.shard_count} ({type(options).__name__}), but this process's loading group "
            f"is shard_index={plan.shard_index} of shard_count={plan.shard_count}. Processes "
            "whose devices need the same rows must read the same shard (ShardByJaxProcess is "
            "wrong once a model replica spans processes); pass "
            "shard_options=jaxload.grain_shard_options(layout, global_batch_size) to the sampler.")
    batches = [op for op in compat.data_loader_operations(loader)
               if isinstance(op, grain.transforms.Batch)]
    if not batches or batches[-1].batch_size != plan.local_batch_size:
        found = f"batch_size={batches[-1].batch_size}" if batches else "no Batch operation"
        raise ValueError(
            f"the grain.DataLoader batches with {found}, but each process must load "
            f"local_batch_size={plan.local_batch_size} rows per step (global_batch_size="
            f"{plan.global_batch_size} over {plan.shard_count} loading groups); end its "
            f"operations with grain.transforms.Batch({plan.local_batch_size}, drop_remainder="
            f"{remainder == DROP}).")
    dropping = [what for what, drops in (
        (f"its Batch({plan.local_batch_size}, drop_remainder=True) drops each loading group's "
         "last partial batch", batches[-1].drop_remainder),
        ("its sampler's ShardOptions(drop_remainder=True) drops the records that do not divide "
         "evenly between the loading groups", options.drop_remainder)) if drops]
    unread, size = compat.data_loader_unread(loader) if plan.shard_count > 1 else (0, 0)
    if remainder != DROP and unread:
        dropping.append(
            f"its {plan.shard_count} shards read {size // plan.shard_count} of its sampler's "
            f"{size} records each (len(sampler) // shard_count), so {unread} "
            f"{'records are' if unread != 1 else 'record is'} never read, whatever "
            "drop_remainder says")
    if remainder != DROP and plan.shard_count > 1 and dropping:
        fix = ("Give the sampler a multiple of "
               f"{plan.shard_count} records, or pass a grain.MapDataset to from_grain (every "
               "record is read, the last steps padded)" if unread else
               "Pass drop_remainder=False there (jaxload pads the last steps)")
        raise ValueError(
            f"remainder={remainder!r} delivers every record, but the grain.DataLoader drops "
            f"some: {'; '.join(dropping)}. {fix}, or use remainder='drop'.")
