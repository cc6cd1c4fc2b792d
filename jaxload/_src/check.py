"""The implementation of :mod:`jaxload.check` (its public names and documentation are there)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxload._src import watchdog, whereabouts, wire
from jaxload._src.agreement import PeerFailedError, Reports, gather
from jaxload._src.comparisons import (
    ERRORS,
    CheckError,
    DuplicationError,
    PlanMismatchError,
    ReplicationError,
    verify_distinct,
    verify_plan,
    verify_replication,
)
from jaxload._src.defaults import DEFAULT_TIMEOUT_S
from jaxload._src.fingerprints import ShardRecord, fingerprint, shard_records
from jaxload._src.layout import Layout
from jaxload._src.trees import GlobalBatch

__all__ = ("CheckError", "DuplicationError", "PlanMismatchError", "ReplicationError", "batch",
           "distinct", "fingerprint", "plan", "replication")

# compares every process's shard records, as (process, record) pairs; raises a CheckError
Verifier = Callable[[list[tuple[int, ShardRecord]]], None]


@dataclasses.dataclass(frozen=True)
class _Report:
    """A process's report: its records, or why it could not compute them."""

    records: list[Any] | dict[str, Any] | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class _Verdict:
    """The leader's verdict: a process failed, a check failed (its error type), or nothing."""

    failed: str | None = None
    error: str | None = None
    message: str | None = None


def _checked(kind: str, records: Callable[[], object], verify: Callable[[dict[int, Any]], None],
             timeout_s: float, name: str | None = None) -> None:
    """Gathers every process's ``records()`` at the leader, which runs ``verify`` on them and
    publishes the verdict; every process raises the same error (O(N) through the coordinator).

    A process that cannot compute its records reports why: it raises its own exception, the
    others a :class:`~jaxload.PeerFailedError` naming it.
    """
    failure = None
    try:
        report = json.dumps({"records": records()})
    except Exception as e:
        failure, report = e, json.dumps({"error": f"{type(e).__name__}: {e}"})

    def decide(reports: Reports) -> tuple[str, bool]:
        parsed = reports.parsed(_Report)
        failed = sorted(p for p, r in parsed.items() if r.error is not None)
        if failed:
            error = parsed[failed[0]].error
            return json.dumps({"failed": f"process {failed[0]} failed while checking: {error}"}), True
        try:
            verify({p: r.records for p, r in parsed.items()})
        except CheckError as e:
            return json.dumps({"error": type(e).__name__, "message": str(e)}), True
        return "{}", True

    dog = watchdog.this_process()
    dog.start()
    exchange = whereabouts.one_off(f"check.{kind}", name)
    text = gather(exchange, report, decide, timeout_s, watch=dog)
    verdict = wire.fields_of(_Verdict, text, key=f"{exchange.prefix}/0/decision", writer=0)
    if failure is not None:
        raise failure
    if verdict.failed is not None:
        raise PeerFailedError(verdict.failed)
    if verdict.error is not None:
        if verdict.error not in ERRORS:
            raise wire.MalformedValueError(f"malformed verdict in {exchange.prefix!r} written "
                                           f"by process 0: unknown error {verdict.error!r}")
        raise ERRORS[verdict.error](verdict.message)


def _check_batch(tree: GlobalBatch, kind: str, timeout_s: float, name: str | None,
                 *verifiers: Verifier) -> None:
    """Fingerprints this process's shards; the leader runs ``verifiers`` on every process's."""

    _checked(kind, lambda: shard_records(tree, constant_flags=kind != "replication"),
             _verifying_shards(verifiers), timeout_s, name)


def _verifying_shards(verifiers: tuple[Verifier, ...]) -> Callable[[dict[int, Any]], None]:
    """Runs ``verifiers`` on every process's shard records (``seen``: process -> records)."""

    def verify(seen: dict[int, Any]) -> None:
        records = [(p, ShardRecord(*r)) for p in sorted(seen) for r in seen[p]]
        for verifier in verifiers:
            verifier(records)

    return verify


def replication(tree: GlobalBatch, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                name: str | None = None) -> None:
    """Raises :class:`ReplicationError` if devices holding the same index of an array disagree.

    Works for any sharding and rank, in one process or many; every process must call it (with
    arrays of the same global shapes and shardings). The error names the leaf, the rows, and the
    devices and processes holding each version, the minority first.

    Example:
      >>> layout = jaxload.model_replicas_in_process(2)      # each replica on 2 devices
      >>> batch = {"x": jax.device_put(np.arange(8.0), layout.sharding)}
      >>> jaxload.check.replication(batch)                    # silent when replicas agree

      :class:`ReplicationError` shows a failing one.
    """
    _check_batch(tree, "replication", timeout_s, name, verify_replication)


def distinct(tree: GlobalBatch, *, timeout_s: float = DEFAULT_TIMEOUT_S,
             name: str | None = None) -> None:
    """Raises :class:`DuplicationError` if two different row blocks of a batch hold the same data.

    A row block (a per-replica batch: the rows ``[start, stop)`` one device holds) is
    fingerprinted over *all* leaves of the batch together, so legitimately repetitive features (a
    mask, labels from a tiny class set) do not trip the check as long as some feature differs.
    Blocks whose every leaf holds a single repeated value (e.g. all padding) are skipped. Every
    process must call it.

    Example:
      >>> layout = jaxload.data_parallel()
      >>> batch = {"x": jax.device_put(np.arange(16.0), layout.sharding)}
      >>> jaxload.check.distinct(batch)   # silent when each replica got its own rows

      :class:`DuplicationError` shows a failing one.
    """
    _check_batch(tree, "distinct", timeout_s, name, verify_distinct)


def batch(tree: GlobalBatch, *, timeout_s: float = DEFAULT_TIMEOUT_S,
          name: str | None = None) -> None:
    """:func:`replication` and :func:`distinct` with one fingerprinting pass and one exchange.

    Example:
      >>> layout = jaxload.model_replicas_in_process(2)
      >>> batch = {"x": jax.device_put(np.arange(8.0), layout.sharding)}
      >>> jaxload.check.batch(batch)      # silent: replicas agree, row blocks differ
    """
    _check_batch(tree, "batch", timeout_s, name, verify_replication, verify_distinct)


def plan(layout: Layout, global_batch_size: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
         name: str | None = None) -> None:
    """Raises :class:`PlanMismatchError` if processes computed different layouts or batch sizes.

    Compares, across processes, the mesh (axis names, shape, device ids in mesh order), the batch
    axes and the global batch size, and names the processes that differ from process 0.

    Example:
      >>> layout = jaxload.data_parallel()
      >>> jaxload.check.plan(layout, global_batch_size=64)    # silent: the same everywhere
    """
    mine = _plan_record(layout, global_batch_size)
    _checked("plan", lambda: mine, verify_plan, timeout_s, name)


def plan_and_batch(layout: Layout, global_batch_size: int, tree: GlobalBatch, *,
                   timeout_s: float = DEFAULT_TIMEOUT_S, name: str | None = None,
                   distinct: bool = True) -> None:
    """:func:`plan`, then :func:`batch`, in one exchange (a pass's first step); without
    ``distinct``, :func:`replication` only after the plan (where jaxload split one pipeline by
    index or elements, blocks alike are the data's own)."""
    _checked("plan-batch", lambda: plan_and_batch_records(layout, global_batch_size, tree,
                                                          distinct=distinct),
             verify_plan_and_batch, timeout_s, name)


def plan_and_batch_records(layout: Layout, global_batch_size: int, tree: GlobalBatch, *,
                           distinct: bool = True) -> dict[str, Any]:
    """What this process reports for :func:`plan_and_batch` (JSON)."""
    return {"plan": _plan_record(layout, global_batch_size),
            "batch": shard_records(tree, constant_flags=distinct), "distinct": distinct}


def verify_plan_and_batch(seen: dict[int, Any]) -> None:
    """:func:`plan_and_batch`'s comparison of every process's records (``seen``: process ->
    :func:`plan_and_batch_records`); raises a :class:`CheckError`. Row blocks are compared for
    duplicates only where every process asked it (``"distinct"``)."""
    verify_plan({p: r["plan"] for p, r in seen.items()})
    distinct = all(r.get("distinct", True) for r in seen.values())
    _verifying_shards((verify_replication, verify_distinct) if distinct else (
        verify_replication,))({p: r["batch"] for p, r in seen.items()})


def _plan_record(layout: Layout, global_batch_size: int) -> dict[str, Any]:
    mesh = layout.mesh
    return {
        "mesh": dict(mesh.shape),
        "batch_axes": list(layout.batch_axes),
        "feature_specs": {name: str(spec) for name, spec in layout.feature_specs},
        "global_batch_size": global_batch_size,
        "devices": fingerprint(np.array([d.id for d in mesh.devices.flat])),
    }
