"""Which examples went where: per step, the ids each loading group contributed.

A loader built with ``record="id"`` notes, on the host, the values of the top-level feature
``"id"`` in every per-process batch it assembles (real rows only: padding rows are not listed)
and, once a step has been handed out, keeps them. No device work is involved: the values are
read from the numpy batch before it is placed. Replaying a loss spike is then a matter of looking
up the step's ids and reading those elements again.

Every process of a loading group loads the same rows, so one member per group knows the group's
ids. ``loader.records()`` gives this process's group; ``loader.records(all_processes=True)``
collects every group's on process 0: the first process of each group posts its list once to the
coordination service (the other processes an empty report) and process 0 reads them in one round
(:func:`jaxload._src.agreement.gather`), so the coordinator handles O(N) messages instead of
N x N for an all-to-all exchange. The other processes get their own group's list back without
waiting.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from jaxload._src import agreement, wire
from jaxload._src.agreement import Reports
from jaxload._src.trees import HostBatch
from jaxload._src.whereabouts import Name


def check_record(record: str | None) -> str | None:
    if record is not None and (not isinstance(record, str) or not record):
        raise TypeError(f"record must be the name of a top-level feature (e.g. 'id') or None, got "
                        f"{record!r}")
    return record


class Recorder:
    """Per (pass, step): the ids of this process's batch, kept once the step is handed out.

    The prefetch thread adds a step's ids when it assembles the batch; the loop's thread marks
    the step handed out when ``next()`` returns it, so steps prefetched but never consumed (a
    pass stopped early) are left out.

    Example:
      >>> r = Recorder("id", shard_index=0)
      >>> r.start_pass(); r.add(0, {"id": np.array([4, 5])}); r.handed_out(0)
      >>> r.steps()
      [{'pass': 0, 'step': 0, 'ids': {0: [4, 5]}}]
    """

    def __init__(self, feature: str | None, shard_index: int):
        self.feature = check_record(feature)
        self._shard_index = shard_index
        self._pass = -1
        self._pending: dict[tuple[int, int], list[Any]] = {}
        self._done: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def check(self, local_batch: HostBatch) -> None:
        """A ValueError, before any device work, if the batch has no such feature."""
        if self.feature is None:
            return
        if not isinstance(local_batch, dict) or self.feature not in local_batch:
            found = sorted(map(str, local_batch)) if isinstance(local_batch, dict) else (
                f"{type(local_batch).__name__} elements, not a dict")
            raise ValueError(f"record={self.feature!r} names no top-level feature of the batch "
                             f"(features: {found}); record a top-level key of dict elements")

    def start_pass(self) -> None:
        with self._lock:
            self._pass += 1
            self._pending.clear()

    def add(self, step: int, local_batch: Mapping[str, Any] | None) -> None:
        """This process's rows of ``step`` (None: it holds only padding)."""
        if self.feature is None:
            return
        ids = [] if local_batch is None else np.asarray(local_batch[self.feature]).tolist()
        with self._lock:
            self._pending[(self._pass, step)] = ids

    def handed_out(self, step: int) -> None:
        if self.feature is None:
            return
        with self._lock:
            ids = self._pending.pop((self._pass, step), None)
            if ids is not None:
                self._done.append({"pass": self._pass, "step": step,
                                   "ids": {self._shard_index: ids}})

    def steps(self, *, clear: bool = False) -> list[dict[str, Any]]:
        with self._lock:
            done = [dict(entry, ids=dict(entry["ids"])) for entry in self._done]
            if clear:
                self._done.clear()
        return done


class LoadingGroups(Protocol):
    """What :func:`gather` needs of a loader's :class:`~jaxload.Plan`."""

    @property
    def shard_index(self) -> int: ...

    @property
    def shard_count(self) -> int: ...

    @property
    def loading_groups(self) -> tuple[tuple[int, ...], ...]: ...


def gather(mine: list[dict[str, Any]], plan: LoadingGroups, timeout_s: float,
           name: Name) -> list[dict[str, Any]]:
    """Every group's ids per step on process 0 (this group's elsewhere); see the module doc."""
    transport = agreement.this_process_transport()
    if transport is None or plan.shard_count == 1:  # process 0's group has them all
        return mine
    writers = [group[0] for group in plan.loading_groups]  # each group's first process
    merged: list[dict[str, Any]] = []

    def merge(reports: Reports) -> tuple[str, bool]:
        merged.extend(_merged(mine, reports, writers))
        return "", True

    speaks = writers[plan.shard_index] == transport.process_index
    agreement.gather(name, json.dumps(mine) if speaks else "", merge, timeout_s,
                     transport=transport, wait=False)
    return merged if transport.process_index == agreement.LEADER else mine


def _merged(mine: list[dict[str, Any]], reports: Reports,
            writers: list[int]) -> list[dict[str, Any]]:
    """Process 0's steps with the ids of every group, read from the report of its first
    process (the others report nothing)."""
    merged: list[dict[str, Any]] = [dict(entry, ids={}) for entry in mine]
    for group, writer in enumerate(writers):
        key, text = f"{reports.prefix}/{writer}", reports[writer]
        theirs = wire.loads(text, key=key, writer=writer)
        if not (isinstance(theirs, list) and all(
                isinstance(e, dict) and isinstance(e.get("ids"), dict) for e in theirs)):
            raise wire.MalformedValueError(
                f"malformed value in {key!r} written by process {writer}: not a list of "
                f"steps with their ids: {text[:200]!r}")
        if len(theirs) != len(merged):
            raise RuntimeError(f"loading group {group} recorded {len(theirs)} steps, process 0 "
                               f"{len(merged)}; call records() at the same point everywhere")
        for entry, other in zip(merged, theirs, strict=True):
            entry["ids"].update({int(g): ids for g, ids in other["ids"].items()})
    return merged
