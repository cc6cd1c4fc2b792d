"""The implementation of :mod:`jaxload.check` (its public names and documentation are there)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxload._src import watchdog, whereabouts, wire
from jaxload._src.agreement import PeerFailedError, _ranges, gather_once
from jaxload._src.assemble import leaf_name
from jaxload._src.layouts import Layout

PyTree = Any

DEFAULT_TIMEOUT_S = 600.0


class CheckError(ValueError):
    """A run-time check found data on the wrong devices (the base of the errors below).

    Example:
      >>> layout = jaxload.data_parallel()
      >>> same = jax.device_put(np.tile([1.0, 2.0], (8, 1)), layout.sharding)  # 8 equal rows
      >>> try:
      ...     jaxload.check.batch({"x": same})
      ... except jaxload.check.CheckError as e:
      ...     print(type(e).__name__)
      DuplicationError
    """


class ReplicationError(CheckError):
    """Devices that should hold identical rows of a global array hold different data.

    Raised by :func:`replication` and :func:`batch` on every process.

    Example:
      Device 1 holds other data than its partner in the model replica on devices 0 and 1:

      >>> layout = jaxload.model_replicas_in_process(2)       # replicas of 2 devices
      >>> rows = np.arange(8.0)
      >>> indices = layout.sharding.addressable_devices_indices_map((8,))
      >>> shards = [jax.device_put(rows[index] + (d.id == 1), d) for d, index in indices.items()]
      >>> x = jax.make_array_from_single_device_arrays((8,), layout.sharding, shards)
      >>> jaxload.check.replication({"x": x})
      Traceback (most recent call last):
      ...
      jaxload.check.ReplicationError: batch['x'] rows [0, 2) should be identical on every device
      that holds them, but 2 versions exist: devices 0 (process 0) hold version 1; devices 1 ...
    """


class DuplicationError(CheckError):
    """Devices that hold different rows of a batch hold identical data.

    Raised by :func:`distinct` and :func:`batch` on every process.

    Example:
      Every device got the same row, as when each process loads the whole, unsharded pipeline:

      >>> layout = jaxload.data_parallel()
      >>> x = jax.device_put(np.tile([1.0, 2.0], (8, 1)), layout.sharding)
      >>> jaxload.check.distinct({"x": x})
      Traceback (most recent call last):
      ...
      jaxload.check.DuplicationError: different rows of the batch hold identical data: rows [0, 1)
      on devices 0 (process 0); rows [1, 2) on devices 1 (process 0); ...
    """


class PlanMismatchError(CheckError):
    """Processes computed different layouts or global batch sizes.

    Raised by :func:`plan` on every process, naming the processes that differ from process 0
    and what each of them built.

    Example:
      It takes two processes to differ; in one process the check always passes:

      >>> jaxload.check.plan(jaxload.data_parallel(), global_batch_size=64)
      >>> issubclass(jaxload.PlanMismatchError, ValueError)
      True
    """


_ERRORS = {e.__name__: e for e in (ReplicationError, DuplicationError, PlanMismatchError)}
_SHOWN = 8  # processes listed one by one in an error; the rest are counted


def fingerprint(data: np.ndarray) -> str:
    """A stable 64-bit fingerprint of an array's bytes, shape and dtype (hex).

    Example:
      >>> a = np.arange(4, dtype=np.int32)
      >>> jaxload.check.fingerprint(a) == jaxload.check.fingerprint(a.copy())
      True
      >>> jaxload.check.fingerprint(a) == jaxload.check.fingerprint(a.astype(np.int64))
      False
      >>> len(jaxload.check.fingerprint(a))
      16
    """
    data = np.asarray(data)
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{data.dtype.str}{data.shape}".encode())
    h.update(np.ascontiguousarray(data).reshape(-1).view(np.uint8))  # bytes of any dtype, no copy
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class _Report:
    """A process's report: its records, or why it could not compute them."""

    records: list | dict | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class _Verdict:
    """The leader's verdict: a process failed, a check failed (its error type), or nothing."""

    failed: str | None = None
    error: str | None = None
    message: str | None = None


def _checked(kind: str, records: Callable[[], Any], verify: Callable[[dict[int, Any]], None],
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

    def decide(reports: dict[int, str]) -> tuple[str, bool]:
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
    text = gather_once(exchange, report, decide, timeout_s, watch=dog)
    verdict = wire.fields_of(_Verdict, text, key=f"{exchange.prefix}/0/decision", writer=0)
    if failure is not None:
        raise failure
    if verdict.failed is not None:
        raise PeerFailedError(verdict.failed)
    if verdict.error is not None:
        if verdict.error not in _ERRORS:
            raise wire.MalformedValueError(f"malformed verdict in {exchange.prefix!r} written "
                                           f"by process 0: unknown error {verdict.error!r}")
        raise _ERRORS[verdict.error](verdict.message)


def _records(tree: PyTree, constant_flags: bool) -> list[list]:
    """Per addressable shard: leaf name, rows start and stop, full index, device id, fingerprint,
    and (only if ``constant_flags``, for ``distinct``) whether it holds a single repeated value."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not isinstance(leaf, jax.Array):
            raise TypeError(f"{leaf_name(path)} is a {type(leaf).__name__}, not a jax.Array")
        for shard in leaf.addressable_shards:
            index = [s.indices(n)[:2] for s, n in zip(shard.index, leaf.shape, strict=True)]
            data = np.asarray(shard.data)
            constant = constant_flags and bool(data.size == 0 or (data == data.flat[0]).all())
            out.append([leaf_name(path), *(index[0] if index else (0, 1)), json.dumps(index),
                        shard.device.id, fingerprint(data), constant])
    return out


def _check_batch(tree: PyTree, kind: str, timeout_s: float, name: str | None,
                 *verifiers) -> None:
    """Fingerprints this process's shards; the leader runs ``verifiers`` on every process's."""

    def verify(seen: dict[int, list]) -> None:
        records = [(p, r) for p in sorted(seen) for r in seen[p]]
        for verifier in verifiers:
            verifier(records)

    _checked(kind, lambda: _records(tree, constant_flags=kind != "replication"), verify,
             timeout_s, name)


def _holders(devices: list[tuple[int, int]]) -> str:
    return ", ".join(f"{d} (process {p})" for d, p in devices)


def _verify_replication(records: list[tuple[int, list]]) -> None:
    by_index: dict[tuple, dict[str, list[tuple[int, int]]]] = {}
    for process, (name, start, stop, index, device, fp, _) in records:
        by_index.setdefault((name, start, stop, index), {}).setdefault(fp, []).append((device, process))
    for (name, start, stop, _), versions in by_index.items():
        if len(versions) > 1:
            ordered = sorted(versions.values(), key=len)
            described = "; ".join(f"devices {_holders(h)} hold version {i + 1}"
                                  for i, h in enumerate(ordered))
            culprit = ("the devices of version 1 are the minority" if len(ordered[0]) < len(ordered[1])
                       else "no version has a majority, so any of them may be the wrong one")
            raise ReplicationError(
                f"{name} rows [{start}, {stop}) should be identical on every device that holds "
                f"them, but {len(versions)} versions exist: {described}; {culprit}. Their "
                "processes loaded other data than their replica partners (a pipeline sharded by "
                "process index instead of by loading group, or unsynchronized shuffling)."
            )


def _verify_distinct(records: list[tuple[int, list]]) -> None:
    blocks: dict[tuple[int, int, int, int], list] = {}  # (process, device, start, stop)
    for process, (name, start, stop, _, device, fp, constant) in records:
        block = blocks.setdefault((process, device, start, stop), [[], True])
        block[0].append(f"{name}={fp}")
        block[1] &= constant
    holders: dict[str, dict[tuple[int, int], list[tuple[int, int]]]] = {}
    for (process, device, start, stop), (fps, constant) in blocks.items():
        if not constant:  # all padding, say: identical blocks are legitimate
            fp = hashlib.blake2b("|".join(fps).encode(), digest_size=8).hexdigest()
            holders.setdefault(fp, {}).setdefault((start, stop), []).append((device, process))
    for by_rows in holders.values():
        if len(by_rows) > 1:
            described = "; ".join(f"rows [{a}, {b}) on devices {_holders(h)}"
                                  for (a, b), h in sorted(by_rows.items()))
            raise DuplicationError(
                f"different rows of the batch hold identical data: {described}. These devices "
                "should have different per-replica batches; the processes probably loaded the "
                "same data (a pipeline not sharded by loading group, or shard=False over "
                "identical pipelines)."
            )


def replication(tree: PyTree, *, timeout_s: float = DEFAULT_TIMEOUT_S,
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
    _check_batch(tree, "replication", timeout_s, name, _verify_replication)


def distinct(tree: PyTree, *, timeout_s: float = DEFAULT_TIMEOUT_S,
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
    _check_batch(tree, "distinct", timeout_s, name, _verify_distinct)


def batch(tree: PyTree, *, timeout_s: float = DEFAULT_TIMEOUT_S,
          name: str | None = None) -> None:
    """:func:`replication` and :func:`distinct` with one fingerprinting pass and one exchange.

    Example:
      >>> layout = jaxload.model_replicas_in_process(2)
      >>> batch = {"x": jax.device_put(np.arange(8.0), layout.sharding)}
      >>> jaxload.check.batch(batch)      # silent: replicas agree, row blocks differ
    """
    _check_batch(tree, "batch", timeout_s, name, _verify_replication, _verify_distinct)


def plan(layout: Layout, global_batch_size: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
         name: str | None = None) -> None:
    """Raises :class:`PlanMismatchError` if processes computed different layouts or batch sizes.

    Compares, across processes, the mesh (axis names, shape, device ids in mesh order), the batch
    axes and the global batch size, and names the processes that differ from process 0.

    Example:
      >>> layout = jaxload.data_parallel()
      >>> jaxload.check.plan(layout, global_batch_size=64)    # silent: the same everywhere
    """
    mesh = layout.mesh
    mine = {
        "mesh": dict(mesh.shape),
        "batch_axes": list(layout.batch_axes),
        "feature_specs": {name: str(spec) for name, spec in layout.feature_specs},
        "global_batch_size": global_batch_size,
        "devices": fingerprint(np.array([d.id for d in mesh.devices.flat])),
    }
    _checked("plan", lambda: mine, _verify_plan, timeout_s, name)


def _verify_plan(seen: dict[int, dict]) -> None:
    reference = seen[min(seen)]
    differ = {p: v for p, v in seen.items() if v != reference}
    if differ:
        shown = sorted(differ)[:_SHOWN]
        lines = [f"  process {min(seen)}: {_describe_plan(reference)}"] + [
            f"  process {p}: {_describe_plan(differ[p])}" for p in shown]
        if len(differ) > len(shown):
            lines.append(f"  ... and {len(differ) - len(shown)} more processes")
        raise PlanMismatchError(
            f"processes [{_ranges(sorted(differ))}] use a different layout or global batch "
            "size than process 0; every process must build the same layout:\n" + "\n".join(lines)
        )


def _describe_plan(p: dict) -> str:
    specs = f", feature_specs {p['feature_specs']}" if p["feature_specs"] else ""
    return (f"mesh {p['mesh']}, batch_axes {tuple(p['batch_axes'])}{specs}, global_batch_size "
            f"{p['global_batch_size']}, device order #{p['devices']}")
